"""A job whose family asks for GPUs stops at once without working CUDA; CPU jobs stay CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spag.errors import SpagInputError
from spag.ops.device import driver_cuda_version, family_device, select_device

torch = pytest.importorskip("torch")
NO_CUDA = not torch.cuda.is_available()
needs_no_cuda = pytest.mark.skipif(not NO_CUDA, reason="this machine has working CUDA")
SPAG = [sys.executable, "-m", "spag"]


def test_family_device_follows_the_gpus_asked_for():
    config = {"resources": {"selfplay": {"gpus": 1}, "cpu": {}, "train": {"gpus": 0}}}
    assert family_device(config, "selfplay") == "cuda"
    assert family_device(config, "train") == "cpu"
    assert family_device(config, "cpu") == "cpu"


def test_cpu_stays_cpu_and_auto_falls_back():
    assert select_device("cpu", "step") == "cpu"
    if NO_CUDA:
        assert select_device("auto", "step") == "cpu"
        assert select_device(None, "step") == "cpu"
    with pytest.raises(SpagInputError, match="--device must be one of"):
        select_device("tpu", "step")


@pytest.fixture(autouse=True)
def _no_gpu_lease(monkeypatch):
    # select_device leases GPUs on a machine that has some: not from the test process.
    monkeypatch.setattr("spag.ops.gpu_lease.claim_local_gpus", lambda count, step, total: None)


def test_a_cuda_process_runs_attention_without_cudnn(monkeypatch):
    # cuDNN's attention plans every new shape (67 ms a call on an H200): a process that
    # gets CUDA leaves it out of SDPA's kernels.
    monkeypatch.setattr("spag.ops.device.cuda_problem", lambda probe=True: None)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        assert select_device("cuda", "spag score-ref") == "cuda"
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


@needs_no_cuda
def test_cuda_without_cuda_names_both_versions_and_the_setting():
    with pytest.raises(SpagInputError) as err:
        select_device("cuda", "spag play")
    text = str(err.value)
    assert text.startswith("spag play: ")
    assert f"torch {torch.__version__} is built for CUDA" in text
    assert f"driver supports CUDA {driver_cuda_version() or 'none'}" in text
    assert "resources.<family>.gpus" in text


def _fails_at_once(cmd: list[str], tmp_path: Path) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "asks for GPUs" in proc.stderr and "driver supports CUDA" in proc.stderr
    return proc.stderr


@needs_no_cuda
def test_gpu_steps_refuse_to_run_on_the_cpu(tiny_model_dir, tmp_path):
    """play, score-ref, train and eval-reasoning with --device cuda stop before loading."""
    words = tmp_path / "words.txt"
    words.write_text("apple\nriver\n")
    out = tmp_path / "shard.parquet"
    _fails_at_once(
        [*SPAG, "play", "--model", str(tiny_model_dir), "--words", str(words),
         "--output", str(out), "--device", "cuda"],
        tmp_path,
    )  # fmt: skip
    assert not out.exists()
    from training_samples import sample_rows, write_samples

    samples = write_samples(tmp_path / "samples.parquet", sample_rows(4, seed=1))
    _fails_at_once(
        [*SPAG, "score-ref", "--model", str(tiny_model_dir), "--samples", str(samples),
         "--output", str(tmp_path / "scored.parquet"), "--device", "cuda"],
        tmp_path,
    )  # fmt: skip
    _fails_at_once(
        [*SPAG, "train", "--objective", "offline_po", "--model", str(tiny_model_dir),
         "--samples", str(samples), "--output", str(tmp_path / "m"),
         "--checkpoint-dir", str(tmp_path / "c"), "--loss-log", str(tmp_path / "l.tsv"),
         "--device", "cuda"],
        tmp_path,
    )  # fmt: skip
    _fails_at_once(
        [*SPAG, "eval-reasoning", "--model", str(tiny_model_dir), "--tasks", "x",
         "--output", str(tmp_path / "r.json"), "--device", "cuda"],
        tmp_path,
    )  # fmt: skip
    assert not (tmp_path / "m").exists() and not (tmp_path / "c").exists()
