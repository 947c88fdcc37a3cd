"""Resume: which trainer checkpoints belong to this run, and the newest complete one."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from dataclasses import MISSING, asdict, fields
from pathlib import Path

from spag.data.tables import atomic_path, file_sizes, sha256_file, size_problem
from spag.training.distributed import barrier
from spag.training.settings import TrainConfig

# Written into a trainer checkpoint once every rank has saved it (a complete checkpoint).
COMPLETE_MARKER = "spag_checkpoint_complete"

log = logging.getLogger(__name__)

# The loss log the trainer appends to while it runs (copied to the output at the end).
WORK_LOSS_LOG = "loss_log.tsv"
# The fingerprint of the run the checkpoints under a checkpoint folder belong to.
RUN_FILE = "spag_run.json"
# Damaged checkpoints are renamed with this prefix: kept to look at, never resumed
# from, and out of the Trainer's `checkpoint-*` rotation.
DAMAGED_PREFIX = "damaged-"


def run_fingerprint(cfg: TrainConfig, model_identity: str, world_size: int) -> dict:
    """What a checkpoint must share with this run to be resumed from (the objective as
    ``method``: the name checkpoints of earlier runs recorded, so that they still resume)."""
    keep = {("method" if k == "objective" else k): v for k, v in asdict(cfg).items()}
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
        "report_to",
        "tracking_dir",
        "project",
        "run_name",
        "stage",
    ):
        keep.pop(k)
    keep.update(
        model_identity=model_identity,
        samples_sha256=sha256_file(cfg.samples),
        world_size=world_size,
    )
    # As read back from RUN_FILE (tuples as lists, e.g. the adapter's target modules),
    # so that the same run compares equal to its own record.
    return json.loads(json.dumps(keep))


def write_complete_marker(folder: Path, step: int) -> None:
    """Mark a checkpoint written to the end, with the size of every file in it.

    The sizes let resume notice a file cut short or lost afterwards (a disk that
    filled up, a ZeRO shard missing) without reading gigabytes of optimizer state.
    """

    files = file_sizes(folder, leave_out=COMPLETE_MARKER)
    with atomic_path(folder / COMPLETE_MARKER) as tmp:
        tmp.write_text(json.dumps({"step": step, "files": files}, indent=1) + "\n")


def checkpoint_problem(folder: Path) -> str | None:
    """Why a checkpoint marked complete cannot be resumed from, or None if it can.

    Every file the marker lists must be there at its size; JSON files must parse,
    safetensors headers must describe data the file holds, torch zip archives must
    have their directory (written last, so a cut file has none).
    """
    import zipfile

    try:
        marker = json.loads((folder / COMPLETE_MARKER).read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return f"{COMPLETE_MARKER} unreadable ({exc})"
    listed = marker.get("files", {}) if isinstance(marker, dict) else {}
    problem = size_problem(folder, listed)
    if problem is not None:
        return problem
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        name = path.relative_to(folder).as_posix()
        try:
            if path.suffix == ".json":
                json.loads(path.read_text())
            elif path.suffix == ".safetensors":
                _check_safetensors(path)
            elif path.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(path):
                return f"{name} is not a complete torch archive"
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            return f"{name} does not load ({exc})"
    return None


def _check_safetensors(path: Path) -> None:
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError("no header")
        header = json.loads(fh.read(int.from_bytes(head, "little")))
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + int.from_bytes(head, "little") + end > path.stat().st_size:
        raise ValueError("data cut short")


def set_aside_damaged(root: Path) -> None:
    """Rename damaged checkpoints (newest first) until the newest left is sound."""
    for folder in reversed(complete_checkpoints(root)):
        problem = checkpoint_problem(folder)
        if problem is None:
            return
        aside = root / f"{DAMAGED_PREFIX}{folder.name}"
        shutil.rmtree(aside, ignore_errors=True)
        folder.rename(aside)
        log.warning(
            "%s: damaged (%s); set aside as %s, resuming from the previous checkpoint",
            folder,
            problem,
            aside,
        )


def complete_checkpoints(checkpoint_dir: str | os.PathLike) -> list[Path]:
    """Checkpoints that were written to the end, oldest first."""

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


def same_run(old: dict | None, fingerprint: dict) -> bool:
    """Whether checkpoints recorded under ``old`` belong to the run ``fingerprint``: the same
    record, up to settings added to the package since, at their defaults (an upgrade that
    adds a setting does not orphan a killed run's checkpoints)."""
    if old is None:
        return False
    defaults = {f.name: f.default for f in fields(TrainConfig) if f.default is not MISSING}
    added = {
        k for k in fingerprint.keys() - old.keys()
        if k in defaults and fingerprint[k] == json.loads(json.dumps(defaults[k]))
    }  # fmt: skip
    return old == {k: v for k, v in fingerprint.items() if k not in added}


def prepare_checkpoint_dir(cfg: TrainConfig, fingerprint: dict, is_main: bool) -> Path | None:
    """Return the checkpoint to resume from, discarding checkpoints of a different run."""

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
        if not same_run(old, fingerprint):
            stale = sorted(root.glob("checkpoint-*")) + sorted(
                root.glob(f"{DAMAGED_PREFIX}checkpoint-*")
            )
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
        set_aside_damaged(root)
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


def truncate_loss_log(path: str | os.PathLike, last_step: int) -> None:
    """Drop rows after ``last_step`` (logged by a run killed after its last checkpoint)."""
    p = Path(path)
    if not p.exists():
        return
    lines = p.read_text().splitlines()
    if not lines:
        return
    kept = [lines[0]] + [ln for ln in lines[1:] if ln and int(ln.split("\t", 1)[0]) <= last_step]
    p.write_text("\n".join(kept) + "\n")
