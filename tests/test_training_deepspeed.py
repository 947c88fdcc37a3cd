"""Real ZeRO-3 training on CPU: the paper's ``zero3_offload`` (CPU Adam, built in the node's
extension folder; parameters offloaded) with one and two ranks, and bf16 side columns."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess

import pytest
from training_samples import sample_rows, write_samples

from spag.training.scoring import score_file

pytestmark = pytest.mark.deepspeed


def _train_cmd(model, scored, out, *extra: str) -> list[str]:
    return [
        "spag", "train", "--objective", "offline_po",
        "--model", str(model), "--samples", str(scored),
        "--output", str(out / "model"), "--checkpoint-dir", str(out / "ckpt"),
        "--loss-log", str(out / "loss.tsv"), "--max-length", "96",
        "--per-device-batch-size", "2", "--gradient-accumulation-steps", "2",
        "--learning-rate", "1e-3", "--save-steps", "1", *extra,
    ]  # fmt: skip


def _scored(model, tmp_path, rows: int, seed: int, batch_size: int):
    """``rows`` samples scored under ``model`` (what a SPAG epoch trains on)."""
    samples = write_samples(tmp_path / "samples.parquet", sample_rows(rows, seed=seed))
    scored = tmp_path / "scored.parquet"
    score_file(model, samples, scored, batch_size=batch_size, max_length=96)
    return scored


def test_zero3_offload_one_rank(tiny_model_dir, tmp_path):
    """The paper's config on one rank: CPU Adam and offloaded parameters; step 0's ratio
    is 1 (scored and trained on the same packed attention path)."""
    scored = _scored(tiny_model_dir, tmp_path, 8, seed=3, batch_size=4)
    out = tmp_path / "run"
    cmd = _train_cmd(
        tiny_model_dir, scored, out, "--deepspeed", "zero3_offload", "--max-steps", "1",
        "--device", "cpu",
    )  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "1 rank(s)" in proc.stderr
    # CPU Adam built (or loaded) in the node's own extension folder before the engine
    assert re.search(r"DeepSpeed op CPUAdamBuilder ready: .*/spag/torch_extensions/", proc.stderr)
    with (out / "loss.tsv").open() as fh:
        (row,) = list(csv.DictReader(fh, delimiter="\t"))
    assert abs(float(row["ratio_min"]) - 1.0) <= 1e-6 and abs(float(row["ratio_max"]) - 1.0) <= 1e-6


def test_zero3_two_ranks_on_cpu(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    scored = _scored(tiny_model_dir, tmp_path, 16, seed=5, batch_size=8)
    out = tmp_path / "run"
    cmd = [
        shutil.which("torchrun"), "--standalone", "--nproc_per_node", "2", "--no-python",
        *_train_cmd(tiny_model_dir, scored, out, "--deepspeed", "zero3_offload",
                    "--max-steps", "2", "--keep-checkpoints"),
    ]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    # The first DeepSpeed run on a machine compiles its CPU communication op (cached after).
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "2 rank(s)" in proc.stderr
    assert proc.stderr.count("DeepSpeed op CPUAdamBuilder ready") == 2  # each rank loads it
    with (out / "loss.tsv").open() as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert [int(r["step"]) for r in rows] == [1, 2]
    # 2 ranks x 2 micro-batches x 2 samples per step, counted over all ranks.
    assert float(rows[0]["n_game"]) + float(rows[0]["n_sft"]) == 8
    assert abs(float(rows[0]["ratio_max"]) - 1.0) <= 1e-5
    assert abs(float(rows[0]["ratio_min"]) - 1.0) <= 1e-5
    # ZeRO-3 checkpoints (per-rank shards) and the gathered final weights.
    assert list((out / "ckpt" / "checkpoint-2").glob("global_step2/*zero_pp_rank_1*"))
    model = AutoModelForCausalLM.from_pretrained(out / "model", use_safetensors=True)
    assert model.config.vocab_size == model.get_input_embeddings().weight.shape[0]

    # A ZeRO shard of the last checkpoint lost: the retry sets that checkpoint aside
    # and resumes from the previous one, redoing step 2 only.
    (shard,) = (out / "ckpt" / "checkpoint-2").glob("global_step2/*zero_pp_rank_1*optim*")
    shard.unlink()
    retry = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert retry.returncode == 0, (retry.stdout + retry.stderr)[-4000:]
    assert f"{shard.name} is missing" in retry.stderr
    assert re.search(r"resuming from \S*/checkpoint-1\b", retry.stderr)
    assert (out / "ckpt" / "damaged-checkpoint-2").is_dir()
    with (out / "loss.tsv").open() as fh:
        assert [int(r["step"]) for r in csv.DictReader(fh, delimiter="\t")] == [1, 2]


def test_zero3_offload_with_an_adapter_checkpointing_and_resume(tiny_model_dir, tmp_path):
    """LoRA under the paper's ZeRO-3 (parameters partitioned as they load, then wrapped)
    with non-reentrant activation checkpointing, where frozen weights are a known trap:
    the adapter learns, step 0's ratio is 1, and a damaged last checkpoint resumes from
    the one before with the adapter's optimizer state."""
    from safetensors.torch import load_file

    scored = _scored(tiny_model_dir, tmp_path, 8, seed=7, batch_size=4)
    out = tmp_path / "run"
    cmd = _train_cmd(
        tiny_model_dir, scored, out, "--deepspeed", "zero3_offload", "--max-steps", "2",
        "--device", "cpu", "--activation-checkpointing", "--keep-checkpoints",
        "--peft", "r=4", "lora_alpha=8",
    )  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert re.search(r"LoRA r=4 alpha=8 on 14 modules", proc.stderr), proc.stderr[-3000:]
    with (out / "loss.tsv").open() as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert (
        abs(float(rows[0]["ratio_min"]) - 1) <= 1e-6
        and abs(float(rows[0]["ratio_max"]) - 1) <= 1e-6
    )
    # B starts at zero: after two steps every B has moved, so gradients reached each adapter
    # through the recomputed layers.
    adapter = load_file(out / "model" / "adapter" / "adapter_model.safetensors")
    b = {k: v for k, v in adapter.items() if "lora_B" in k}
    assert len(b) == 14 and all(v.abs().max() > 0 for v in b.values())
    merged = load_file(out / "model" / "model.safetensors")
    base = load_file(tiny_model_dir / "model.safetensors")
    assert not all(merged[k].equal(base[k]) for k in base if "q_proj" in k)

    (states,) = (out / "ckpt" / "checkpoint-2").glob("global_step2/*optim_states.pt")
    states.unlink()
    retry = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert retry.returncode == 0, (retry.stdout + retry.stderr)[-4000:]
    assert re.search(r"resuming from \S*/checkpoint-1\b", retry.stderr), [
        line for line in retry.stderr.splitlines() if "spag." in line
    ]
    with (out / "loss.tsv").open() as fh:
        assert [int(r["step"]) for r in csv.DictReader(fh, delimiter="\t")] == [1, 2]
