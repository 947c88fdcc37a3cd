"""Resume: which trainer checkpoints belong to this run, and the newest complete one."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from dataclasses import asdict
from pathlib import Path

from spag.data.tables import atomic_path, sha256_file
from spag.training.distributed import barrier
from spag.training.settings import TrainConfig

log = logging.getLogger(__name__)

# The loss log the trainer appends to while it runs (copied to the output at the end).
WORK_LOSS_LOG = "loss_log.tsv"
# The fingerprint of the run the checkpoints under a checkpoint folder belong to.
RUN_FILE = "spag_run.json"


def run_fingerprint(cfg: TrainConfig, model_identity: str, world_size: int) -> dict:
    """What a checkpoint must share with this run to be resumed from."""
    keep = asdict(cfg)
    for k in (
        "output",
        "checkpoint_dir",
        "loss_log",
        "keep_checkpoints",
        "device",  # a run may resume on another machine
        "save_steps",
        "save_total_limit",
        "logging_steps",
        "samples",
        "model",
        "ref_model",
    ):
        keep.pop(k)
    keep.update(
        model_identity=model_identity,
        samples_sha256=sha256_file(cfg.samples),
        world_size=world_size,
    )
    return keep


def complete_checkpoints(checkpoint_dir: str | os.PathLike) -> list[Path]:
    """Checkpoints that were written to the end, oldest first."""
    from spag.training.trainer import COMPLETE_MARKER

    root = Path(checkpoint_dir)
    found = []
    for p in root.glob("checkpoint-*"):
        step = p.name.split("-", 1)[1]
        if (
            step.isdigit()
            and (p / COMPLETE_MARKER).is_file()
            and (p / "trainer_state.json").is_file()
        ):
            found.append((int(step), p))
    return [p for _, p in sorted(found)]


def prepare_checkpoint_dir(cfg: TrainConfig, fingerprint: dict, is_main: bool) -> Path | None:
    """Return the checkpoint to resume from, discarding checkpoints of a different run."""
    from spag.training.trainer import truncate_loss_log

    root = Path(cfg.checkpoint_dir)
    run_file = root / RUN_FILE
    if is_main:
        root.mkdir(parents=True, exist_ok=True)
        try:
            old = json.loads(run_file.read_text()) if run_file.is_file() else None
        except (ValueError, UnicodeDecodeError):
            # Cut short by a kill: its checkpoints cannot be told to be this run's.
            log.warning("%s: unreadable, its checkpoints are not trusted", run_file)
            old = {"unreadable": str(run_file)}
        if old != fingerprint:
            stale = sorted(root.glob("checkpoint-*"))
            if stale or old is not None:
                log.warning(
                    "%s: checkpoints belong to another run (inputs or settings changed); "
                    "removing %d of them and starting from step 0",
                    root,
                    len(stale),
                )
            for p in stale:
                shutil.rmtree(p, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                (root / WORK_LOSS_LOG).unlink()
            with atomic_path(run_file) as tmp:
                tmp.write_text(json.dumps(fingerprint, indent=2, sort_keys=True) + "\n")
    barrier()
    done = complete_checkpoints(root)
    resume = done[-1] if done else None
    if is_main:
        if resume is None:
            with contextlib.suppress(FileNotFoundError):
                (root / WORK_LOSS_LOG).unlink()
        else:
            state = json.loads((resume / "trainer_state.json").read_text())
            truncate_loss_log(root / WORK_LOSS_LOG, int(state["global_step"]))
    barrier()
    return resume
