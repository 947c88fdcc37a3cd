"""Experiment trackers (config section ``tracking``): names, folders and environment.

Training logs through the Hugging Face ``Trainer``'s own integrations (its
``report_to``); this module names the run and points every tracker at a folder
under ``results/tracking/`` so that nothing needs a network: TensorBoard event
files, W&B in offline mode (``wandb sync`` later), MLflow's SQLite store,
trackio's local database. A variable the user set already wins over these defaults.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import math
import numbers
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.settings import Checked, opt

TRACKERS = ("tensorboard", "wandb", "trackio", "mlflow")
# The module each tracker's Trainer integration imports.
TRACKER_MODULES = {
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "trackio": "trackio",
    "mlflow": "mlflow",
}
DEFAULT_DIR = "results/tracking"


@dataclass(frozen=True, kw_only=True)
class TrackingSettings(Checked):
    """The trackers of the training stages (config ``tracking``); offline files under
    ``results/tracking/``. The workflow hands them to ``spag train`` through the
    environment (:func:`tracker_environment`), whose by-hand defaults log nowhere."""

    report_to: tuple[str, ...] = opt(
        ("tensorboard",),
        "trackers every training stage logs to through the Trainer's integrations ([] for "
        "none): TensorBoard event files under results/tracking/tensorboard/<run>/<stage>; "
        "W&B offline under results/tracking/wandb (wandb sync); MLflow's SQLite store "
        "results/tracking/mlflow.db; trackio under results/tracking/trackio. A "
        "WANDB_*/MLFLOW_*/TRACKIO_DIR variable already set wins",
        schema={"items": {"enum": list(TRACKERS)}, "uniqueItems": True},
    )
    project: str | None = opt(
        None,
        "project (W&B, trackio) or experiment (MLflow); null: the run folder's name",
        schema={"minLength": 1},
    )
    run_name: str | None = opt(
        None,
        "the run's name (W&B group); stages log as <run_name>-imitation, <run_name>-epoch1, "
        "...; null: <run folder>-<first 8 hex digits of the config's SHA-256>",
        schema={"minLength": 1},
    )


log = logging.getLogger(__name__)


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
            f"pip install {' '.join(missing)}, or the project's pins: "
            f"pip install -e '.[trackers]' (or leave it out of {where})"
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
            # MLflow 3 refuses its file store by default; SQLite is its local backend.
            MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow.db'}",
            MLFLOW_EXPERIMENT_NAME=project,
        )
    if "trackio" in names:
        env["TRACKIO_DIR"] = str(root / "trackio")
    return env


def apply_environment(env: dict[str, str]) -> None:
    """Set what the user has not set already."""
    for key, value in env.items():
        os.environ.setdefault(key, value)


def loop_run_name(run_name: str) -> str:
    """The name of the loop's own run (one point per epoch) beside the training stages."""
    return f"{run_name}-loop"


def wandb_run_id(name: str) -> str:
    """A W&B run id from a run name: W&B refuses ``/ \\ # ? % :`` and long ids."""
    rid = re.sub(r"[^A-Za-z0-9._-]", "-", name)
    if len(rid) > 64:
        rid = f"{rid[:55]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return rid


def log_loop_figures(
    row: dict[str, Any],
    epoch: int,
    names: list[str],
    tracking_dir: str | os.PathLike,
    project: str,
    run_name: str,
) -> list[str]:
    """Log one epoch's summary figures to every tracker in ``names`` with the epoch as
    the step; return the trackers that took them.

    A tracker that fails is logged and skipped: the epoch's summary (the declared
    output) never depends on a tracker. A rerun of an epoch replaces its point in
    TensorBoard and offline W&B (one file or folder per epoch); MLflow and trackio
    keep both values at that step, the later one last.
    """
    figures = loop_figures(row)
    if not figures:
        return []
    logged = []
    with _environment(tracker_environment(names, tracking_dir, project, run_name, "loop")):
        for name in names:
            try:
                _LOOP_WRITERS[name](figures, epoch, Path(tracking_dir), project, run_name)
            except Exception as e:  # noqa: BLE001 - any tracker failure leaves the run going
                log.warning("tracking: %s did not take epoch %d's figures: %s", name, epoch, e)
            else:
                logged.append(name)
    return logged


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """:func:`apply_environment` for the duration of the block only."""
    added = [k for k in env if k not in os.environ]
    apply_environment(env)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def loop_figures(row: dict[str, Any]) -> dict[str, float]:
    """The summary row's finite numbers as ``loop/<column>`` (the epoch is the step)."""
    return {
        f"loop/{k}": float(v)
        for k, v in row.items()
        if k != "epoch"
        and isinstance(v, numbers.Real)
        and not isinstance(v, bool)
        and math.isfinite(v)
    }


def _loop_tensorboard(
    figures: dict[str, float], epoch: int, root: Path, project: str, run_name: str
) -> None:
    """An event file per epoch in ``tensorboard/<run>/loop/`` (one run in TensorBoard,
    one point per epoch)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir = root / "tensorboard" / run_name / "loop"
    logdir.mkdir(parents=True, exist_ok=True)
    for old in logdir.glob(f"events.out.tfevents.*.epoch{epoch}"):
        old.unlink()
    writer = EventFileWriter(str(logdir), filename_suffix=f".epoch{epoch}")
    values = [Summary.Value(tag=tag, simple_value=v) for tag, v in sorted(figures.items())]
    writer.add_event(Event(wall_time=time.time(), step=epoch, summary=Summary(value=values)))
    writer.close()


def _loop_wandb(
    figures: dict[str, float], epoch: int, root: Path, project: str, run_name: str
) -> None:
    """One W&B run ``<run>-loop`` (id alike) in the run's group, step = epoch.

    W&B cannot resume an offline run, so offline each epoch writes its own folder,
    ``wandb-loop/epoch<E>/`` (replaced on rerun), holding only that step: ``wandb sync``
    the first epoch's, then ``wandb sync --append`` the others, in order. Online (a
    user's ``WANDB_MODE``), the same id resumes the run.
    """
    import wandb

    name = loop_run_name(run_name)
    offline = os.environ.get("WANDB_MODE", "offline") in ("offline", "dryrun")
    folder = root / "wandb-loop" / f"epoch{epoch}" if offline else root
    if offline:
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=project,
        group=run_name,
        name=name,
        id=wandb_run_id(name),
        job_type="loop",
        resume="allow",
        dir=str(folder),
        settings=wandb.Settings(silent=True, console="off", save_code=False),
    )
    try:
        run.define_metric("loop/*", step_metric="epoch")
        run.log({**figures, "epoch": epoch}, step=epoch)
    finally:
        run.finish()


def _loop_mlflow(
    figures: dict[str, float], epoch: int, root: Path, project: str, run_name: str
) -> None:
    """One MLflow run ``<run>-loop`` in the project's experiment, found again by name."""
    import mlflow

    name = loop_run_name(run_name)
    experiment = mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", project))
    found = mlflow.search_runs(
        experiment_ids=[experiment.experiment_id],
        filter_string=f"tags.mlflow.runName = '{name}'",
        output_format="list",
    )
    run_id = found[0].info.run_id if found else None
    with mlflow.start_run(run_id=run_id, run_name=None if run_id else name):
        mlflow.log_metrics(figures, step=epoch)


def _loop_trackio(
    figures: dict[str, float], epoch: int, root: Path, project: str, run_name: str
) -> None:
    """One trackio run ``<run>-loop`` in the project, resumed each epoch."""
    import trackio

    trackio.init(
        project=project, name=loop_run_name(run_name), group=run_name, resume="allow", embed=False
    )
    try:
        trackio.log(figures, step=epoch)
    finally:
        trackio.finish()


_LOOP_WRITERS = {
    "tensorboard": _loop_tensorboard,
    "wandb": _loop_wandb,
    "mlflow": _loop_mlflow,
    "trackio": _loop_trackio,
}


def guard_tracker_callbacks(trainer: Any, names: list[str]) -> None:
    """Wrap the Trainer's callbacks of the trackers in ``names`` so that a tracker's
    failure (a server out of reach, a refused key, a full disk) is one warning and
    that tracker's silence, never a lost training job."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    kinds = {INTEGRATION_TO_CALLBACK[n]: n for n in names}
    handler = trainer.callback_handler
    handler.callbacks = [
        _GuardedTracker(cb, kinds[type(cb)]) if type(cb) in kinds else cb
        for cb in handler.callbacks
    ]


class _GuardedTracker:
    """Forwards every Trainer event to a tracker's callback until it first fails."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner, self.name, self.failed = inner, name, False

    def __getattr__(self, event: str) -> Any:
        target = getattr(self.inner, event)
        if not event.startswith("on_"):
            return target

        def call(args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if self.failed:
                return None
            try:
                return target(args, state, control, **kwargs)
            except Exception as e:  # noqa: BLE001 - any tracker failure leaves training going
                self.failed = True
                log.warning(
                    "tracking: %s failed at %s and is left out of this stage (training goes "
                    "on): %s: %s",
                    self.name,
                    event,
                    type(e).__name__,
                    e,
                )
                return None

        return call
