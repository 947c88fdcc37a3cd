"""A training job killed with SIGKILL resumes from its last complete checkpoint."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from training_samples import sample_rows, write_samples

from spag.cli import main
from spag.training.scoring import score_file

MAX_STEPS = 24


def _cmd(model: Path, samples: Path, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "spag", "train", "--objective", "offline_po",
        "--model", str(model), "--samples", str(samples),
        "--output", str(out / "model"), "--checkpoint-dir", str(out / "ckpt"),
        "--loss-log", str(out / "loss.tsv"), "--max-length", "96",
        "--per-device-batch-size", "2", "--gradient-accumulation-steps", "1",
        "--learning-rate", "1e-3", "--max-steps", str(MAX_STEPS), "--save-steps", "3",
        "--save-total-limit", "3", "--keep-checkpoints",
    ]  # fmt: skip


def test_killed_training_resumes_from_its_last_checkpoint(tiny_model_dir, tmp_path):
    samples = write_samples(tmp_path / "samples.parquet", sample_rows(40, seed=3))
    scored = tmp_path / "scored.parquet"
    score_file(tiny_model_dir, samples, scored, batch_size=8, max_length=96)
    out = tmp_path / "run"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    first_log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(
        _cmd(tiny_model_dir, scored, out), stdout=first_log, stderr=subprocess.STDOUT,
        env=env, start_new_session=True,
    )  # fmt: skip
    marker = None
    deadline = time.monotonic() + 240
    while marker is None and time.monotonic() < deadline and proc.poll() is None:
        done = sorted(out.glob("ckpt/checkpoint-*/spag_checkpoint_complete"))
        marker = done[0] if done else None
        time.sleep(0.02)
    if marker is None:
        proc.kill()
        pytest.fail(f"no checkpoint before the run ended (rc {proc.poll()})")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    first_log.close()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "model").exists()  # nothing that looks complete
    assert not (out / "loss.tsv").exists()
    killed_at = max(
        int(p.parent.name.split("-")[1])
        for p in out.glob("ckpt/checkpoint-*/spag_checkpoint_complete")
    )
    assert killed_at < MAX_STEPS

    second = subprocess.run(
        _cmd(tiny_model_dir, scored, out), capture_output=True, text=True, env=env, timeout=300
    )
    assert second.returncode == 0, second.stderr[-3000:]
    log = second.stdout + second.stderr
    m = re.search(r"resuming from \S*checkpoint-(\d+)", log)
    assert m, log[-3000:]
    resumed = int(m.group(1))
    assert resumed >= killed_at > 0
    # Only the remaining steps ran in the second job.
    assert log.count("'loss'") == MAX_STEPS - resumed
    state = json.loads((out / f"ckpt/checkpoint-{MAX_STEPS}/trainer_state.json").read_text())
    assert state["global_step"] == MAX_STEPS
    assert (out / "model" / "model.safetensors").is_file()
    with (out / "loss.tsv").open() as fh:
        steps = [int(r["step"]) for r in csv.DictReader(fh, delimiter="\t")]
    assert steps == list(range(1, MAX_STEPS + 1))  # each step logged once, none lost

    # The same job never interrupted: optimizer, schedule and data order were restored,
    # so the resumed steps reproduce its losses and learning rates.
    plain = tmp_path / "plain"
    assert main(_cmd(tiny_model_dir, scored, plain)[3:]) == 0
    resumed_rows, plain_rows = _rows(out / "loss.tsv"), _rows(plain / "loss.tsv")
    for a, b in zip(resumed_rows, plain_rows, strict=True):
        for key in ("loss", "learning_rate", "ratio_mean"):
            assert float(a[key]) == pytest.approx(float(b[key]), rel=1e-4, abs=1e-6), (
                a["step"],
                key,
            )


def _rows(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def test_a_cut_run_file_restarts_instead_of_failing_every_retry(tmp_path):
    """A run file cut short by a kill (it used to give a raw JSONDecodeError on every
    retry): its checkpoints are not trusted, training starts from step 0."""
    from types import SimpleNamespace

    from spag.training.checkpoints import RUN_FILE, prepare_checkpoint_dir

    root = tmp_path / "ckpt"
    (root / "checkpoint-4").mkdir(parents=True)
    (root / RUN_FILE).write_text('{"seed": 4')
    cfg = SimpleNamespace(checkpoint_dir=str(root))
    assert prepare_checkpoint_dir(cfg, {"seed": 42}, is_main=True) is None
    assert json.loads((root / RUN_FILE).read_text()) == {"seed": 42}
    assert not (root / "checkpoint-4").exists()
    assert not list(root.glob(f".{RUN_FILE}.*"))  # written atomically, nothing left beside


def _fake_checkpoint(root: Path, step: int) -> Path:
    """A checkpoint folder with the kinds of files the Trainer and DeepSpeed write."""
    import torch
    from safetensors.torch import save_file

    from spag.training.checkpoints import write_complete_marker

    folder = root / f"checkpoint-{step}"
    (folder / f"global_step{step}").mkdir(parents=True)
    save_file({"w": torch.ones(64, 64)}, str(folder / "model.safetensors"))
    torch.save({"state": torch.zeros(256)}, folder / "optimizer.pt")
    for rank in (0, 1):
        torch.save({"p": torch.ones(32)}, folder / f"global_step{step}" / f"rank{rank}_states.pt")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    write_complete_marker(folder, step)
    return folder


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda f: _truncate(f / "optimizer.pt"), "optimizer.pt has"),
        (lambda f: (f / "global_step4" / "rank1_states.pt").unlink(), "rank1_states.pt is missing"),
        (lambda f: _truncate(f / "trainer_state.json"), "trainer_state.json"),
        (lambda f: _truncate(f / "spag_checkpoint_complete"), "unreadable"),
    ],
    ids=["truncated-optimizer", "missing-zero-shard", "truncated-state", "truncated-marker"],
)
def test_a_damaged_last_checkpoint_is_set_aside_and_the_previous_resumed(
    tmp_path, caplog, damage, problem
):
    from types import SimpleNamespace

    from spag.training.checkpoints import RUN_FILE, checkpoint_problem, prepare_checkpoint_dir

    root = tmp_path / "ckpt"
    older, newest = _fake_checkpoint(root, 2), _fake_checkpoint(root, 4)
    assert checkpoint_problem(older) is None and checkpoint_problem(newest) is None
    (root / RUN_FILE).write_text(json.dumps({"seed": 1}))
    damage(newest)
    cfg = SimpleNamespace(checkpoint_dir=str(root))
    with caplog.at_level("WARNING"):
        assert prepare_checkpoint_dir(cfg, {"seed": 1}, is_main=True) == older
    assert problem in caplog.text and "damaged-checkpoint-4" in caplog.text
    assert (root / "damaged-checkpoint-4").is_dir() and not newest.exists()
    # both damaged: training starts from step 0, nothing is deleted
    _truncate(older / "model.safetensors")
    assert prepare_checkpoint_dir(cfg, {"seed": 1}, is_main=True) is None
    assert sorted(p.name for p in root.glob("damaged-*")) == [
        "damaged-checkpoint-2",
        "damaged-checkpoint-4",
    ]
