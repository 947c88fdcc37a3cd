"""A training job's memory per GPU (spag.ops.capacity.training_memory), full fine-tuning
and LoRA, against hand computations for LLaMA-2-7B; ``spag training-memory`` on the
paper's config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from model_configs import LLAMA2_7B

from spag.cli import main
from spag.errors import SpagInputError
from spag.ops.capacity import (
    GIB,
    ZeroLayout,
    lora_parameter_count,
    parameter_count,
    training_memory,
)
from spag.training.distributed import DEEPSPEED_DIR

REPO = Path(__file__).resolve().parents[1]
P = 6_738_415_616  # LLaMA-2-7B's parameters
# The paper's micro-batch: 2 samples of 2048 tokens, bf16, activation checkpointing.
PAPER = dict(per_device_batch_size=2, max_length=2048, bf16=True, activation_checkpointing=True)
# Activations by hand, 4096 tokens in bf16: each layer's input (32 x 4096 x 4096 x 2
# bytes = 1,073,741,824) and one layer recomputed with its gradients, 2 x 97,280 elements
# a token (norms 4 x 4096; q, k, v twice 2 x 12,288; attention and o_proj outputs
# 2 x 4096; the MLP's 4 x 11,008 and its output 4096) x 4096 tokens x 2 bytes.
ACTIVATIONS = 1_073_741_824 + 2 * 97_280 * 4096 * 2
# Logits of one chunk of 1024 learned positions (spag.training.head), made again in the
# backward: 1024 x 32,000 x (2 bf16 + 4 fp32 log-softmax + 4 its gradient + 2 bf16 gradient).
LOGITS = 1024 * 32_000 * 12
CUDA = 1.5 * GIB


def test_parameters_and_lora_parameters_by_hand():
    assert parameter_count(LLAMA2_7B) == P
    # r x (in + out) per projection: q, k, v, o 16 x 8192 each; gate, up, down
    # 16 x 15,104 each: 1,249,280 a layer, x 32 layers.
    assert lora_parameter_count(LLAMA2_7B, 16) == 39_976_960
    # The LoRA paper's setting (r = 8 on q and v): peft reports 4,194,304 for 7B.
    assert lora_parameter_count(LLAMA2_7B, 8, ("q_proj", "v_proj")) == 4_194_304
    with pytest.raises(SpagInputError, match="qkv_proj is not a projection of a Llama-style"):
        lora_parameter_count(LLAMA2_7B, 8, ("qkv_proj",))


def test_full_and_lora_on_one_gpu_by_hand():
    full = training_memory(LLAMA2_7B, **PAPER)
    # fp32 weights, fp32 gradients, AdamW's two fp32 moments: 16 bytes a parameter.
    assert full.states_gib * GIB == pytest.approx(16 * P)
    assert full.activations_gib * GIB == ACTIVATIONS
    assert full.logits_gib * GIB == LOGITS
    assert full.total_gib * GIB == pytest.approx(16 * P + ACTIVATIONS + LOGITS + CUDA)
    assert 104 < full.total_gib < 105  # more than an 80 GB card

    lora = training_memory(LLAMA2_7B, lora_rank=16, **PAPER)
    # The frozen base in bf16, the adapters with gradients and moments in fp32.
    base, adapters = 2 * P, 16 * 39_976_960
    assert lora.trained_parameters == 39_976_960
    assert lora.total_gib * GIB == pytest.approx(base + adapters + ACTIVATIONS + LOGITS + CUDA)
    assert 17 < lora.total_gib < 18  # one 40 GB card holds it


def test_zero3_shards_the_states_and_offload_moves_them_to_the_host():
    zero3 = ZeroLayout.from_config(json.loads((DEEPSPEED_DIR / "zero3.json").read_text()))
    assert zero3 == ZeroLayout(stage=3, max_live_parameters=10**9)
    sharded = training_memory(LLAMA2_7B, zero=zero3, gpus=8, **PAPER)
    # 2 bf16 weights + 2 bf16 gradients + 12 fp32 master weights and moments, over 8 GPUs;
    # up to stage3_max_live_parameters (1e9) gathered bf16 weights, and the largest
    # module's gradients (the embeddings, 32,000 x 4096).
    assert sharded.states_gib * GIB == pytest.approx(16 * P / 8)
    assert sharded.gathered_gib * GIB == 2 * 10**9 + 2 * 32_000 * 4096
    # An adapter has no gradients of the base to gather; a model under the limit is
    # gathered whole.
    lora = training_memory(LLAMA2_7B, zero=ZeroLayout(3, max_live_parameters=10**10),
                           lora_rank=16, **PAPER)  # fmt: skip
    assert lora.gathered_gib * GIB == 2 * P

    offload = json.loads((DEEPSPEED_DIR / "zero3_offload_fp32_grads.json").read_text())
    layout = ZeroLayout.from_config(offload)
    assert layout == ZeroLayout(3, offload_optimizer=True, offload_param=True, fp32_grads=True)
    moved = training_memory(LLAMA2_7B, zero=layout, gpus=8, **PAPER)
    assert moved.states_gib == 0
    # fp32 gradient partitions: 18 bytes a parameter, with DeepSpeed's 1.5x buffers.
    assert moved.host_gib * GIB == pytest.approx(18 * P * 1.5)
    assert ZeroLayout.from_config(None) == ZeroLayout()


def test_checkpointing_keeps_one_layer_of_activations():
    plain = training_memory(LLAMA2_7B, **{**PAPER, "activation_checkpointing": False})
    assert plain.activations_gib * GIB == 32 * 97_280 * 4096 * 2
    assert plain.activations_gib > 9 * training_memory(LLAMA2_7B, **PAPER).activations_gib


def test_command_on_the_paper_config(tmp_path, capsys):
    model = tmp_path / "config.json"
    model.write_text(json.dumps(LLAMA2_7B))
    one_gpu = tmp_path / "one_gpu.yaml"
    # One GPU under ZeRO-3 without offload: bf16 weights (bf16 full fine-tuning without
    # DeepSpeed is refused: no reference precision reproduces autocast's).
    one_gpu.write_text("resources: {train: {gpus: 1, nodes: 1}}\nspag: {deepspeed: zero3}\n")
    configs = [str(REPO / "config.yaml"), str(REPO / "configs/paper-llama2-7b.yaml")]
    assert main(["training-memory", "--model", str(model), "--configfile", *configs,
                 str(one_gpu), "--stage", "spag"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "spag: 2 samples of 2048 tokens per GPU, 1 GPU(s) on 1 node(s)" in out
    full, lora = out.splitlines()[1:3]
    # 16 bytes a parameter over one GPU, 1e9 gathered bf16 weights and the embeddings'
    # gradients (2.1 GiB) added; the config's own method (peft: null) marked.
    assert full.startswith("* full fine-tuning (6,738,415,616 trained parameters): 106.9 GiB")
    assert full.endswith("fits: H200")
    assert lora.startswith("  LoRA r=16 (39,976,960 trained parameters): 19.4 GiB")
    assert "fits: A100-40GB, A100-80GB / H100-80GB, H200" in lora


def test_the_lora_config_trains_each_stage_on_one_gpu(tmp_path, capsys):
    """configs/paper-llama2-7b-lora.yaml over the paper's config: one GPU per training job,
    the stage's own adapter (r = 32 on every projection) estimated and marked, within an
    80 GB card (and a 40 GB one), where full fine-tuning on that GPU is not."""
    model = tmp_path / "config.json"
    model.write_text(json.dumps(LLAMA2_7B))
    configs = [REPO / "config.yaml", REPO / "configs/paper-llama2-7b.yaml",
               REPO / "configs/paper-llama2-7b-lora.yaml"]  # fmt: skip
    assert main(["training-memory", "--model", str(model), "--configfile",
                 *map(str, configs)]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    for stage, at in (("imitation", 0), ("spag", 3)):
        assert lines[at].startswith(f"{stage}: 2 samples of 2048 tokens per GPU, 1 GPU(s)")
        full, lora = lines[at + 1 : at + 3]
        assert full.startswith("  full fine-tuning") and "fits: H200" in full
        # r x (in + out) per projection at r = 32: twice the r = 16 count above.
        # No DeepSpeed on one GPU: nothing gathered.
        assert lora.startswith("* LoRA r=32 (79,953,920 trained parameters): 18.1 GiB")
        assert "gathered" not in lora
        assert "A100-40GB, A100-80GB / H100-80GB" in lora


def test_targets_the_estimate_cannot_count_are_named(tmp_path, capsys):
    """GPT-2's fused projection: a clear error naming the flag, not a traceback."""
    model = tmp_path / "config.json"
    model.write_text(json.dumps(LLAMA2_7B))
    assert main(["training-memory", "--model", str(model), "--configfile",
                 str(REPO / "config.yaml"), "--lora-targets", "c_attn"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "--lora-targets: c_attn is not a projection of a Llama-style decoder" in err
    assert "Traceback" not in err
