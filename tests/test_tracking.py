"""Trackers: names of a run, the environment the Trainer's integrations read, and the
loop's figures in TensorBoard event files read back."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml
from conftest import REPO
from tracker_readers import mlflow_history, trackio_logs, wandb_run

from spag.config import validate_config
from spag.errors import SpagInputError
from spag.ops.tracking import (
    check_trackers_available,
    config_digest,
    log_loop_figures,
    parse_report_to,
    run_names,
    tracker_environment,
)

BASE = validate_config(yaml.safe_load((REPO / "config.yaml").read_text()))


def test_run_names_default_to_the_folder_and_the_config_digest(tmp_path):
    run = tmp_path / "my-run"
    run.mkdir()
    project, name = run_names(BASE, run)
    assert project == "my-run" and name == f"my-run-{config_digest(BASE)}"
    other = copy.deepcopy(BASE)
    other["spag"]["learning_rate"] = 1e-6
    assert config_digest(other) != config_digest(BASE)
    named = copy.deepcopy(BASE)
    named["tracking"].update(project="spag", run_name="lr2e-6")
    assert run_names(named, run) == ("spag", "lr2e-6")


def test_every_tracker_is_pointed_inside_the_tracking_folder(tmp_path):
    env = tracker_environment(
        ["tensorboard", "wandb", "mlflow", "trackio"], tmp_path, "proj", "run", "epoch1"
    )
    assert env["TENSORBOARD_LOGGING_DIR"] == str(tmp_path / "tensorboard" / "run" / "epoch1")
    assert env["WANDB_MODE"] == "offline" and env["WANDB_DIR"] == str(tmp_path)
    assert env["WANDB_RUN_GROUP"] == "run" and env["WANDB_PROJECT"] == "proj"
    assert env["MLFLOW_TRACKING_URI"] == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert env["TRACKIO_DIR"] == str(tmp_path / "trackio")
    assert tracker_environment([], tmp_path, "p", "r", "s") == {}


def test_report_to_is_parsed_and_checked():
    assert parse_report_to("none") == [] and parse_report_to("") == []
    assert parse_report_to("tensorboard, wandb") == ["tensorboard", "wandb"]
    with pytest.raises(SpagInputError, match="unknown tracker"):
        parse_report_to("tensorboard,neptune")
    check_trackers_available(["tensorboard"])


def test_the_schema_refuses_an_unknown_tracker():
    cfg = copy.deepcopy(BASE)
    cfg["tracking"]["report_to"] = ["tensorboard", "comet"]
    with pytest.raises(SpagInputError, match=r"key 'tracking.report_to.1'"):
        validate_config(cfg)


def test_loop_figures_read_back_one_point_per_epoch(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    row = {"epoch": 1, "decisive_frac": 0.25, "reward_mean": np.float64(0.1),
           "samples": np.int64(40), "eval_opponent": "imitation", "loss_final": float("nan")}  # fmt: skip
    assert log_loop_figures(row, 1, ["tensorboard"], tmp_path, "p", "run") == ["tensorboard"]
    log_loop_figures(
        {**row, "epoch": 2, "decisive_frac": 0.5}, 2, ["tensorboard"], tmp_path, "p", "run"
    )
    # a rerun of epoch 1 replaces its point
    log_loop_figures({**row, "decisive_frac": 0.3}, 1, ["tensorboard"], tmp_path, "p", "run")
    events = EventAccumulator(str(tmp_path / "tensorboard" / "run" / "loop"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"loop/decisive_frac", "loop/reward_mean", "loop/samples"} <= tags
    assert "loop/eval_opponent" not in tags and "loop/loss_final" not in tags
    points = sorted((e.step, round(e.value, 6)) for e in events.Scalars("loop/decisive_frac"))
    assert points == [(1, 0.3), (2, 0.5)]
    assert log_loop_figures(row, 1, [], tmp_path, "p", "run") == []


_LOOP = (
    "import json, logging, sys\n"
    "logging.basicConfig(level=logging.WARNING)\n"
    "from spag.ops.tracking import log_loop_figures\n"
    "row, epoch, names, folder = json.loads(sys.argv[1])\n"
    "print(json.dumps(log_loop_figures(row, epoch, names, folder, 'proj', 'run-ab12cd34')))\n"
)


def _log_loop(row: dict, names: list[str], folder, **env: str) -> tuple[list[str], str]:
    """One epoch's figures logged as ``spag summarize-epoch`` does: in a process of its
    own (trackers read their variables at import), none of the caller's variables."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("WANDB_", "MLFLOW_", "TRACKIO_", "TENSORBOARD_"))
    }
    done = subprocess.run(
        [sys.executable, "-c", _LOOP, json.dumps([row, row["epoch"], names, str(folder)])],
        env={**clean, **env}, cwd=folder, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_the_loop_reaches_every_tracker_one_point_per_epoch(tmp_path):
    """Epochs 1 and 2, then epoch 1 again: TensorBoard and offline W&B hold one point per
    epoch (the rerun replaces its own); MLflow and trackio one run that grows by an
    epoch at a time (the rerun's value is the later one at its step)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    everything = ["tensorboard", "wandb", "mlflow", "trackio"]
    row = {"epoch": 1, "decisive_frac": 0.25, "eval_win_rate": 0.1, "eval_opponent": "imitation"}
    assert _log_loop(row, everything, tmp_path)[0] == everything
    _log_loop({**row, "epoch": 2, "decisive_frac": 0.5}, everything, tmp_path)
    _log_loop({**row, "decisive_frac": 0.3}, everything, tmp_path)

    events = EventAccumulator(str(tmp_path / "tensorboard" / "run-ab12cd34" / "loop"))
    events.Reload()
    tb = sorted((e.step, round(e.value, 6)) for e in events.Scalars("loop/decisive_frac"))
    assert tb == [(1, 0.3), (2, 0.5)]

    for epoch, value in ((1, 0.3), (2, 0.5)):
        wb = wandb_run(tmp_path / "wandb-loop" / f"epoch{epoch}")
        assert (wb["id"], wb["name"], wb["project"], wb["group"]) == (
            "run-ab12cd34-loop", "run-ab12cd34-loop", "proj", "run-ab12cd34"
        )  # fmt: skip
        assert wb["history"]["loop/decisive_frac"] == [(epoch, value)]
        assert wb["history"]["epoch"] == [(epoch, epoch)]
        assert "loop/eval_opponent" not in wb["history"]

    ml = mlflow_history(f"sqlite:///{tmp_path / 'mlflow.db'}", "proj", "loop/decisive_frac")
    assert ml == {"run-ab12cd34-loop": [(1, 0.25), (1, 0.3), (2, 0.5)]}

    logs = trackio_logs(tmp_path / "trackio", "proj")
    assert list(logs) == ["run-ab12cd34-loop"]
    points = [(r["step"], r["loop/decisive_frac"]) for r in logs["run-ab12cd34-loop"]]
    assert points == [(1, 0.25), (2, 0.5), (1, 0.3)]


def test_a_failing_tracker_costs_the_loop_only_its_own_figures(tmp_path):
    """W&B told to go online with no key and no server: a warning naming it, and the
    other tracker still gets the epoch."""
    row = {"epoch": 3, "decisive_frac": 0.25}
    logged, err = _log_loop(
        row, ["wandb", "tensorboard"], tmp_path, WANDB_MODE="online",
        WANDB_BASE_URL="http://127.0.0.1:9", WANDB_INIT_TIMEOUT="20", HOME=str(tmp_path),
    )  # fmt: skip
    assert logged == ["tensorboard"]
    assert "tracking: wandb did not take epoch 3's figures" in err


def test_a_configured_tracker_that_cannot_be_imported_is_named_with_its_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    with pytest.raises(SpagInputError) as err:
        check_trackers_available(["tensorboard", "mlflow"])
    assert "key 'tracking.report_to' names mlflow" in str(err.value)
    assert "pip install mlflow" in str(err.value) and ".[trackers]" in str(err.value)
