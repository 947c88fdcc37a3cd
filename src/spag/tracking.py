"""Experiment trackers (config section ``tracking``): names, folders and environment.

Training logs through the Hugging Face ``Trainer``'s own integrations (its
``report_to``); this module names the run and points every tracker at a folder
under ``results/tracking/`` so that nothing needs a network: TensorBoard event
files, W&B in offline mode (``wandb sync`` later), MLflow's file store, trackio's
local database. A variable the user set already wins over these defaults.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError

TRACKERS = ("tensorboard", "wandb", "trackio", "mlflow")
# The module each tracker's Trainer integration imports.
TRACKER_MODULES = {
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "trackio": "trackio",
    "mlflow": "mlflow",
}
DEFAULT_DIR = "results/tracking"


# Sections that do not change a result: left out of the digest that names a run.
_NOT_RESULTS = ("resources", "tracking")
# How the workflow hands the tracking settings to its jobs. Through the environment,
# not the rules' flags: a renamed run or another tracker must not rerun training.
ENV_REPORT_TO = "SPAG_REPORT_TO"
ENV_TRACKING_DIR = "SPAG_TRACKING_DIR"
ENV_PROJECT = "SPAG_TRACKING_PROJECT"
ENV_RUN_NAME = "SPAG_RUN_NAME"


def config_digest(config: dict[str, Any]) -> str:
    """Eight hex digits naming the resolved configuration (resources and tracking aside)."""
    kept = {k: v for k, v in config.items() if k not in _NOT_RESULTS}
    text = json.dumps(kept, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def workflow_environment(
    config: dict[str, Any], workdir: str | os.PathLike, tracking_dir: str = DEFAULT_DIR
) -> dict[str, str]:
    """The variables the workflow sets for its jobs (``spag train``, ``summarize-epoch``)."""
    project, run_name = run_names(config, workdir)
    return {
        ENV_REPORT_TO: ",".join(config["tracking"]["report_to"]) or "none",
        ENV_TRACKING_DIR: str(Path(workdir).resolve() / tracking_dir),
        ENV_PROJECT: project,
        ENV_RUN_NAME: run_name,
    }


def folder_name(workdir: str | os.PathLike = ".") -> str:
    """The run folder's name: the default project (and the start of the run name)."""
    return Path(workdir).resolve().name or "spag"


def run_names(config: dict[str, Any], workdir: str | os.PathLike) -> tuple[str, str]:
    """``(project, run name)``: the configured ones, else the run folder's name and
    ``<folder>-<config digest>``."""
    t = config["tracking"]
    folder = folder_name(workdir)
    project = t["project"] or folder
    return project, t["run_name"] or f"{folder}-{config_digest(config)}"


def parse_report_to(value: str) -> list[str]:
    """``tensorboard,wandb`` -> the list; ``none`` or empty -> []."""
    names = [v.strip() for v in value.split(",") if v.strip() and v.strip() != "none"]
    unknown = sorted(set(names) - set(TRACKERS))
    if unknown:
        raise SpagInputError(
            f"--report-to: unknown tracker(s) {', '.join(unknown)} (known: {', '.join(TRACKERS)})"
        )
    return names


def missing_trackers(names: list[str]) -> list[str]:
    return [n for n in names if importlib.util.find_spec(TRACKER_MODULES[n]) is None]


def check_trackers_available(names: list[str], where: str = "tracking.report_to") -> None:
    missing = missing_trackers(names)
    if missing:
        raise SpagInputError(
            f"key '{where}' names {', '.join(missing)}, which this environment cannot import: "
            f"pip install {' '.join(missing)} (or leave it out of {where})"
        )


def tracker_environment(
    names: list[str], tracking_dir: str | os.PathLike, project: str, run_name: str, stage: str
) -> dict[str, str]:
    """Environment variables the Trainer's integrations read, for one training stage."""
    root = Path(tracking_dir).resolve()
    env: dict[str, str] = {}
    if "tensorboard" in names:
        env["TENSORBOARD_LOGGING_DIR"] = str(root / "tensorboard" / run_name / stage)
    if "wandb" in names:
        env.update(
            WANDB_MODE="offline",
            WANDB_DIR=str(root),
            WANDB_PROJECT=project,
            WANDB_RUN_GROUP=run_name,
        )
    if "mlflow" in names:
        env.update(
            MLFLOW_TRACKING_URI=(root / "mlruns").as_uri(),
            MLFLOW_EXPERIMENT_NAME=project,
        )
    if "trackio" in names:
        env["TRACKIO_DIR"] = str(root / "trackio")
    return env


def apply_environment(env: dict[str, str]) -> None:
    """Set what the user has not set already."""
    for key, value in env.items():
        os.environ.setdefault(key, value)


def log_loop_figures(
    row: dict[str, Any],
    epoch: int,
    names: list[str],
    tracking_dir: str | os.PathLike,
    run_name: str,
) -> list[str]:
    """Log one epoch's summary figures with the epoch as the step; return the trackers
    that took them.

    TensorBoard: an event file per epoch in ``tensorboard/<run>/loop/`` (one run in
    TensorBoard, one point per epoch). The other trackers get the training stages
    only (their integrations in the Trainer).
    """
    import math
    import numbers
    import time

    figures = {
        f"loop/{k}": float(v)
        for k, v in row.items()
        if k != "epoch"
        and isinstance(v, numbers.Real)
        and not isinstance(v, bool)
        and math.isfinite(v)
    }
    logged = []
    if "tensorboard" in names and figures:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        logdir = Path(tracking_dir) / "tensorboard" / run_name / "loop"
        logdir.mkdir(parents=True, exist_ok=True)
        # A rerun of this epoch replaces its file; other epochs' files stay.
        for old in logdir.glob(f"events.out.tfevents.*.epoch{epoch}"):
            old.unlink()
        writer = EventFileWriter(str(logdir), filename_suffix=f".epoch{epoch}")
        values = [Summary.Value(tag=tag, simple_value=v) for tag, v in sorted(figures.items())]
        writer.add_event(Event(wall_time=time.time(), step=epoch, summary=Summary(value=values)))
        writer.close()
        logged.append("tensorboard")
    return logged
