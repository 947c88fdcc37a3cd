"""Trackers: names of a run, the environment the Trainer's integrations read, and the
loop's figures in TensorBoard event files read back."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml
from conftest import REPO

from spag.config import validate_config
from spag.errors import SpagInputError
from spag.tracking import (
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
    assert env["MLFLOW_TRACKING_URI"] == (tmp_path / "mlruns").as_uri()
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
    assert log_loop_figures(row, 1, ["tensorboard"], tmp_path, "run") == ["tensorboard"]
    log_loop_figures({**row, "epoch": 2, "decisive_frac": 0.5}, 2, ["tensorboard"], tmp_path, "run")
    # a rerun of epoch 1 replaces its point
    log_loop_figures({**row, "decisive_frac": 0.3}, 1, ["tensorboard"], tmp_path, "run")
    events = EventAccumulator(str(tmp_path / "tensorboard" / "run" / "loop"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"loop/decisive_frac", "loop/reward_mean", "loop/samples"} <= tags
    assert "loop/eval_opponent" not in tags and "loop/loss_final" not in tags
    points = sorted((e.step, round(e.value, 6)) for e in events.Scalars("loop/decisive_frac"))
    assert points == [(1, 0.3), (2, 0.5)]
    assert log_loop_figures(row, 1, [], tmp_path, "run") == []
