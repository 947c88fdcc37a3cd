"""`spag status`: a run read from its files and SLURM's queue, and a folder with no run."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import REPO

from spag.ops.status import format_status, run_status

LOSS_HEADER = "step\tepoch\tloss\tkl\tlearning_rate\n"


def _run_folder(root: Path) -> dict:
    """A run half-way through epoch 2 of 2: shards of every kind, training under way."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config.update(epochs=2)
    config["selfplay"]["num_shards"] = 4
    r = root / "results"
    (r / "imitation" / "model").mkdir(parents=True)
    for e in (1, 2):
        (r / f"epoch{e}" / "selfplay").mkdir(parents=True)
        (r / "logs" / f"epoch{e}" / "selfplay").mkdir(parents=True)
    for s in range(4):
        (r / "epoch1" / "selfplay" / f"shard_{s:03d}.parquet").write_bytes(b"x")
    (r / "epoch1" / "episodes.parquet").write_bytes(b"x")
    (r / "epoch1" / "model").mkdir()
    (r / "epoch1" / "eval").mkdir()
    (r / "epoch1" / "eval" / "games.tsv").write_text(
        "epoch\tmodel\trole\tgames\twin_rate\twin_rate_lo\twin_rate_hi\tbroke_rules_rate\n"
        "1\tepoch1\tattacker\t50\t0.42\t0.29\t0.56\t0.1\n"
    )
    shards = r / "epoch2" / "selfplay"
    (shards / "shard_000.parquet").write_bytes(b"x")  # done
    (shards / ".shard_001.parquet.journal.jsonl").write_text("{}\n")  # under way
    (r / "logs" / "epoch2" / "selfplay" / "shard_002.log").write_text("error: ...\n")  # failed
    ckpt = root / "checkpoints" / "epoch2"  # shard 3: not started (or queued, see below)
    ckpt.mkdir(parents=True)
    (ckpt / "loss_log.tsv").write_text(
        LOSS_HEADER + "1\t0.1\t0.9\t0.01\t2e-6\n2\t0.2\t0.8\t0.02\t2e-6\n"
    )
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    return config


def test_a_run_half_way(tmp_path):
    from spag.config import validate_config

    config = validate_config(_run_folder(tmp_path))
    status = run_status(config, tmp_path, squeue="/nonexistent/squeue")
    e1, e2 = status.epochs
    assert (e1.done, e1.trained, e1.evaluated) == (4, True, True)
    assert (e2.done, e2.running, e2.failed, e2.merged) == (1, [1], [2], False)
    assert status.training["epoch2"]["step"] == "2" and "epoch1" not in status.training
    text = format_status(status)
    assert "epochs done: 1 of 2" in text
    assert "epoch 2: shards 1/4 done; running 1; failed 2" in text
    assert "training epoch2: step 2, loss 0.8" in text
    assert "epoch1 as attacker: win 0.420 [0.290, 0.560]" in text


def test_slurm_jobs_of_this_folder_are_listed(tmp_path):
    """squeue's fields as the SLURM executor's jobs carry them (comment rule_..._wildcards_...);
    jobs of other folders are left out."""
    from spag.config import validate_config

    config = validate_config(_run_folder(tmp_path))
    squeue = tmp_path / "squeue"
    here, other = tmp_path.resolve(), "/elsewhere"
    squeue.write_text(
        "#!/bin/sh\n"
        f"echo '701|RUNNING|rule_selfplay_wildcards_2_003|{here}'\n"
        f"echo '702|PENDING|rule_train_spag_wildcards_2|{here}'\n"
        f"echo '703|RUNNING|rule_selfplay_wildcards_2_002|{other}'\n"
    )
    squeue.chmod(squeue.stat().st_mode | stat.S_IXUSR)
    status = run_status(config, tmp_path, squeue=str(squeue))
    assert [j["id"] for j in status.slurm] == ["701", "702"]
    assert status.epochs[1].running == [1, 3]
    assert "702 PENDING: train_spag (2)" in format_status(status)


def test_a_folder_without_a_run_says_so(tmp_path):
    spag = Path(sys.executable).with_name("spag")
    proc = subprocess.run(
        [str(spag), "status"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env=dict(os.environ),
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no run here (no results/ folder)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_status_from_the_command_line(tmp_path):
    _run_folder(tmp_path)
    spag = Path(sys.executable).with_name("spag")
    proc = subprocess.run(
        [str(spag), "status"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "epoch 2: shards 1/4 done" in proc.stdout
