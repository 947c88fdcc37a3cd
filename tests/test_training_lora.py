"""A training stage with a low-rank adapter (``peft``) on the tiny model: the adapter
trains on the frozen model, and the stage writes the full model with the adapter merged
(what every later step reads) and the adapter beside it."""

from __future__ import annotations

import csv
import json

import pytest
from test_training_run import MAX_LENGTH, _train_args, scored  # noqa: F401 - the module's scored samples
from training_samples import sample_rows, write_samples

from spag.cli import main
from spag.config import validate_config
from spag.errors import SpagInputError

pytest.importorskip("peft")

ADAPTER = ["--peft", "r=4", "lora_alpha=8", "target_modules=q_proj,v_proj"]


def test_an_adapter_trains_and_the_stage_writes_the_merged_model(scored, tiny_model_dir, tmp_path):  # noqa: F811
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    rc = main(_train_args(tiny_model_dir, scored, tmp_path, "--objective", "offline_po",
                          "--max-steps", "3", *ADAPTER))  # fmt: skip
    assert rc == 0
    out = tmp_path / "model"
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (out / name).is_file(), name
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        assert (out / "adapter" / name).is_file(), name
    adapter_config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["r"] == 4 and sorted(adapter_config["target_modules"]) == [
        "q_proj",
        "v_proj",
    ]

    # Only the adapted projections moved; every other weight is the base model's, bit for bit.
    base = load_file(tiny_model_dir / "model.safetensors")
    merged = load_file(out / "model.safetensors")
    assert set(merged) == set(base)
    moved = {k for k in base if not torch.equal(base[k], merged[k])}
    assert moved and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in moved), moved

    # The merged model computes what the base model with the adapter computes.
    ids = torch.tensor([[1, 5, 9, 14, 3, 7]])
    with torch.no_grad():
        full = AutoModelForCausalLM.from_pretrained(out, use_safetensors=True)(ids).logits
        base_model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, use_safetensors=True)
        adapted = PeftModel.from_pretrained(base_model, str(out / "adapter"))(ids).logits
    assert torch.allclose(full, adapted, atol=1e-5)

    # A rerun of the stage (the global random state moved on since) trains the same
    # adapter: its random initial A matrices are seeded.
    torch.manual_seed(12345)
    again = tmp_path / "again"
    rc = main(_train_args(tiny_model_dir, scored, again, "--objective", "offline_po",
                          "--max-steps", "3", *ADAPTER))  # fmt: skip
    assert rc == 0
    first, second = (load_file(p / "model" / "adapter" / "adapter_model.safetensors")
                     for p in (tmp_path, again))  # fmt: skip
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)

    with (tmp_path / "loss.tsv").open() as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    # The adapter starts as a no-op (B = 0): step 1's policy is the reference.
    assert abs(float(rows[0]["ratio_max"]) - 1.0) <= 1e-5
    info = json.loads((out / "spag_training.json").read_text())
    assert info["peft"]["r"] == 4 and info["peft"]["target_modules"] == ["q_proj", "v_proj"]


def test_an_adapter_in_bf16_trains_on_a_bf16_base_without_deepspeed(tiny_model_dir, tmp_path):
    """With ``bf16`` an adapter's frozen base is loaded in bfloat16 (no master weights to
    keep) and the adapter trains in float32 under autocast: the reference scored in
    bfloat16 is the step's own forward, and the merged model is written in bfloat16."""
    import torch
    from safetensors.torch import load_file

    from spag.training.scoring import score_file

    samples = write_samples(tmp_path / "samples.parquet", sample_rows(16))
    scored_bf16 = tmp_path / "scored.parquet"
    score_file(tiny_model_dir, samples, scored_bf16, batch_size=4, max_length=MAX_LENGTH,
               dtype="bfloat16")  # fmt: skip
    rc = main(_train_args(tiny_model_dir, scored_bf16, tmp_path, "--objective", "offline_po",
                          "--max-steps", "2", "--bf16", *ADAPTER))  # fmt: skip
    assert rc == 0
    adapter = load_file(tmp_path / "model" / "adapter" / "adapter_model.safetensors")
    assert adapter and {t.dtype for t in adapter.values()} == {torch.float32}
    base = load_file(tiny_model_dir / "model.safetensors")
    merged = load_file(tmp_path / "model" / "model.safetensors")
    assert {t.dtype for t in merged.values()} == {torch.bfloat16}
    kept = [k for k in base if not k.endswith(("q_proj.weight", "v_proj.weight"))]
    assert all(torch.equal(merged[k], base[k].to(torch.bfloat16)) for k in kept)
    # The share of the update that bfloat16 storage rounded away is recorded.
    info = json.loads((tmp_path / "model" / "spag_training.json").read_text())
    assert 0 < info["merge_update_rounding"] <= 1
    with (tmp_path / "loss.tsv").open() as fh:
        first = next(csv.DictReader(fh, delimiter="\t"))
    # B = 0 at step 1: the policy is the scored model (float32 weights under autocast
    # would not be: see tests/test_config_inputs.py).
    assert abs(float(first["ratio_min"]) - 1) < 1e-5 and abs(float(first["ratio_max"]) - 1) < 1e-5


def test_a_target_module_the_model_has_not_is_named(scored, tiny_model_dir, tmp_path, capsys):  # noqa: F811
    args = _train_args(tiny_model_dir, scored, tmp_path, "--objective", "sft_kl",
                       "--max-steps", "1", "--peft", "target_modules=q_proj,qkv_proj")  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--peft.target_modules: qkv_proj not in the model" in err and "q_proj" in err
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize(
    ("peft", "key"),
    [({"r": 0}, "spag.peft.r"), ({"lora_alpha": 0}, "spag.peft.lora_alpha"),
     ({"target_modules": []}, "spag.peft.target_modules"), ({"rank": 8}, "spag.peft.rank")],
)  # fmt: skip
def test_bad_adapter_settings_are_refused_at_plan_time(peft, key):
    with pytest.raises(SpagInputError, match=rf"key '{key}'|unknown key '{key}'"):
        validate_config({"spag": {"peft": peft}})


def test_the_adapter_reaches_the_train_rule_and_only_where_set():
    from spag.settings import step_flags
    from spag.training.settings import TrainConfig, stage_arguments

    config = validate_config({"spag": {"peft": {"r": 8}}})
    assert config["spag"]["peft"]["lora_alpha"] == 32  # the rest at its defaults
    flags = step_flags(TrainConfig, **stage_arguments(config, "spag"))
    assert "--peft r=8 lora_alpha=32 lora_dropout=0.0 target_modules=q_proj,k_proj," in flags
    # merged_dtype at its default (None) is no word: the step reads None, not "None".
    assert "merged_dtype" not in flags
    config = validate_config({"spag": {"peft": {"r": 8, "merged_dtype": "float32"}}})
    flags = step_flags(TrainConfig, **stage_arguments(config, "spag"))
    assert "--peft r=8 merged_dtype=float32 lora_alpha=32" in flags
    assert "--peft" not in step_flags(TrainConfig, **stage_arguments(config, "imitation"))


def test_a_lora_checkpoint_folder_is_resumed_by_its_run_and_no_other(tmp_path):
    """A run's fingerprint equals its record read back (the adapter's settings hold
    tuples, which JSON reads back as lists), and full fine-tuning and LoRA never share
    checkpoints."""
    from spag.training.checkpoints import RUN_FILE, prepare_checkpoint_dir, run_fingerprint
    from spag.training.lora import LoraSettings
    from spag.training.settings import TrainConfig

    samples = tmp_path / "samples.parquet"
    samples.write_bytes(b"rows")
    files = dict(model="m", samples=str(samples), output="o", loss_log="l.tsv",
                 checkpoint_dir=str(tmp_path / "ckpt"), objective="offline_po")  # fmt: skip
    lora = TrainConfig(**files, peft=LoraSettings(r=4))
    full = TrainConfig(**files)
    fingerprint = run_fingerprint(lora, "model-id", 1)
    assert prepare_checkpoint_dir(lora, fingerprint, is_main=True) is None
    assert json.loads((tmp_path / "ckpt" / RUN_FILE).read_text()) == fingerprint
    assert run_fingerprint(lora, "model-id", 1) == fingerprint
    assert run_fingerprint(full, "model-id", 1) != fingerprint


def test_a_merge_in_float32_keeps_the_whole_update(tiny_model_dir, tmp_path):
    """``merged_dtype=float32``: the bf16-trained adapter merged and stored in float32,
    nothing of its update rounded away."""
    import torch
    from safetensors.torch import load_file

    from spag.training.scoring import score_file

    samples = write_samples(tmp_path / "samples.parquet", sample_rows(8))
    scored_bf16 = tmp_path / "scored.parquet"
    score_file(tiny_model_dir, samples, scored_bf16, batch_size=4, max_length=MAX_LENGTH,
               dtype="bfloat16")  # fmt: skip
    rc = main(_train_args(tiny_model_dir, scored_bf16, tmp_path, "--objective", "offline_po",
                          "--max-steps", "2", "--bf16", *ADAPTER, "merged_dtype=float32"))  # fmt: skip
    assert rc == 0
    merged = load_file(tmp_path / "model" / "model.safetensors")
    assert {t.dtype for t in merged.values()} == {torch.float32}
    info = json.loads((tmp_path / "model" / "spag_training.json").read_text())
    assert info["merge_update_rounding"] == 0.0


def _one_linear(weight: float):
    import torch

    class One(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4, bias=False)
            torch.nn.init.constant_(self.lin.weight, weight)

        def forward(self, x):
            return self.lin(x)

    return One()


@pytest.mark.parametrize(
    ("delta", "lost"),
    # W = 1 in bfloat16, whose neighbours are 1 - 2^-8 and 1 + 2^-7 = 1.0078125:
    # 1.001 rounds to 1 (the whole update lost), 1.01 to 1.0078125 (error 0.0021875,
    # 0.21875 of the update), 1.0078125 is stored exactly.
    [(0.001, 1.0), (0.01, 0.21875), (2**-7, 0.0)],
)
def test_the_share_of_an_update_lost_to_rounding_by_hand(delta, lost):
    import torch
    from peft import LoraConfig, get_peft_model

    from spag.training.lora import update_rounding

    model = get_peft_model(_one_linear(1.0), LoraConfig(r=1, lora_alpha=1, target_modules=["lin"]))
    layer = model.base_model.model.lin
    with torch.no_grad():  # B A = delta in every element (scale lora_alpha / r = 1)
        layer.lora_A["default"].weight.fill_(1.0)
        layer.lora_B["default"].weight.fill_(delta)
    assert update_rounding(model, torch.bfloat16) == pytest.approx(lost, rel=1e-4, abs=1e-6)
    assert update_rounding(model, torch.float32) == 0.0
    with torch.no_grad():
        layer.lora_B["default"].weight.zero_()
    assert update_rounding(model, torch.bfloat16) is None  # no update, no share


def test_a_peft_model_projects_only_the_learned_positions(tiny_model_dir):
    """A PeftModel's forward takes ``**kwargs``: it is asked for the learned positions'
    logits only (``logits_to_keep``), with the values of the untrimmed forward."""
    import torch
    from transformers import AutoModelForCausalLM

    from spag.training.lora import LoraSettings, add_adapter
    from spag.training.losses import IGNORE_INDEX
    from spag.training.scoring import _accepts_logits_to_keep, model_sequence_logprobs

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, use_safetensors=True)
    model = add_adapter(base, LoraSettings(r=4, target_modules=("q_proj", "v_proj")))
    assert _accepts_logits_to_keep(model)
    ids = torch.arange(1, 13).reshape(2, 6)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 4:] = ids[:, 4:]
    rows = []
    head = base.get_output_embeddings()
    handle = head.register_forward_hook(lambda m, inp, out: rows.append(out.shape[1]))
    with torch.no_grad():
        trimmed = model_sequence_logprobs(model, ids, torch.ones_like(ids), labels)
        full = model_sequence_logprobs(model, ids, torch.ones_like(ids), labels, trim_logits=False)
    handle.remove()
    assert rows == [3, 6]  # from the position before the first learned token
    torch.testing.assert_close(trimmed, full)


@pytest.mark.parametrize(
    ("peft", "message"),
    [({"target_modules": ["q_proj", "qkv_proj"]},
      r"key 'spag.peft'.target_modules: qkv_proj not in the model \(LlamaForCausalLM; the "
      r"modules an adapter can take: down_proj, embed_tokens, gate_proj, k_proj, lm_head, "
      r"o_proj, q_proj, up_proj, v_proj\)")],
)  # fmt: skip
def test_targets_the_tiny_model_has_not_are_refused_at_plan_time(peft, message):
    """Before any job (the plan), not when the training job starts after M0 and a
    self-play epoch."""
    from spag.config import check_run_inputs

    config = validate_config({"spag": {"peft": peft}})
    with pytest.raises(SpagInputError, match=message):
        check_run_inputs(config)


def test_a_gpt2_model_lists_its_conv1d_layers():
    from transformers import GPT2Config

    from spag.training.lora import LoraSettings, check_targets_for_config

    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)
    with pytest.raises(SpagInputError, match="c_attn, c_fc, c_proj, lm_head, wpe, wte"):
        check_targets_for_config(config, LoraSettings(), "key 'spag.peft'")
    check_targets_for_config(config, LoraSettings(target_modules=("c_attn",)), "key 'spag.peft'")


@pytest.mark.parametrize("target", ["lm_head", "embed_tokens"])
def test_a_tied_embedding_is_refused_as_a_target(tmp_path, target):
    """On a model whose output layer is its input embedding (SmolLM2), the merge would
    write the update into both: refused at plan time (a local folder's config.json) and
    when an adapter is added."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from spag.config import check_run_inputs
    from spag.training.lora import LoraSettings, add_adapter

    tied = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, vocab_size=64, tie_word_embeddings=True)  # fmt: skip
    tied.save_pretrained(tmp_path)
    config = validate_config({
        "base_model": {"name_or_path": str(tmp_path)},
        "imitation": {"peft": {"target_modules": ["q_proj", target]}},
    })  # fmt: skip
    with pytest.raises(SpagInputError, match=rf"key 'imitation.peft'.target_modules: {target} "
                       r"is one matrix with model.embed_tokens and lm_head"):  # fmt: skip
        check_run_inputs(config)
    torch.manual_seed(0)
    with pytest.raises(SpagInputError, match=f"--peft.target_modules: {target} is one matrix"):
        add_adapter(AutoModelForCausalLM.from_config(tied),
                    LoraSettings(target_modules=(target,)), "--peft")  # fmt: skip
    # Untied, the same targets are accepted.
    tied.tie_word_embeddings = False
    tied.save_pretrained(tmp_path)
    check_run_inputs(config)
