"""The options the rules pass to `spag target-words`, `spag assign-rewards` and
`spag eval-reasoning` come from the steps' settings: the values each step runs with."""

from __future__ import annotations

import argparse
import shlex

import pytest

from spag.commands.assign_rewards import AssignRewardsConfig
from spag.commands.eval_reasoning import EvalReasoningConfig
from spag.commands.target_words import TargetWordsConfig
from spag.config import validate_config
from spag.data.words import words_arguments
from spag.evaluation.reasoning import ReasoningSettings, reasoning_arguments
from spag.game.rewards import RewardsSettings, rewards_arguments
from spag.settings import add_arguments, from_arguments, step_flags

CHANGED = {
    "seed": 7,
    "words": {"num_train": 20, "num_test": 5, "min_length": 4, "max_length": 9},
    "rewards": {"decay_weight": 0.5},
    "game": {"prompt_format": "chat"},
    "base_model": {"trust_remote_code": True},
    "resources": {"evaluate": {"gpus": 1}},
    "evaluation": {
        "reasoning": {
            "tasks": ["arc_easy", "my task"],
            "include_path": None,
            "limit": 20,
            "num_fewshot": 0,
            "batch_size": 4,
            "dtype": "bfloat16",
        }
    },
}


@pytest.fixture(params=["default", "changed"])
def name(request):
    return request.param


@pytest.fixture
def config(name):
    return validate_config({} if name == "default" else CHANGED)


def _runs_with(cls: type, options: dict, *required: str):
    """The step's settings when run with the rule's flags (those at the step's default
    left out)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser, cls)
    argv = [*shlex.split(step_flags(cls, **options)), *required]
    return from_arguments(cls, parser.parse_args(argv))


def test_target_words_flags(name, config):
    options = words_arguments(config)
    job = _runs_with(TargetWordsConfig, options, "--output-train", "a", "--output-test", "b")
    w = config["words"]
    assert (job.num_train, job.num_test, job.min_length, job.max_length, job.seed) == (
        w["num_train"], w["num_test"], w["min_length"], w["max_length"], config["seed"],
    )  # fmt: skip


def test_assign_rewards_flags(name, config):
    options = rewards_arguments(config)
    job = _runs_with(AssignRewardsConfig, options, "--episodes", "e", "--output", "o")
    r = config["rewards"]
    assert (job.scheme, job.decay_weight, job.control) == (
        r["scheme"], r["decay_weight"], r["control"],
    )  # fmt: skip
    # at the defaults the contract's command line of docs/design.md section 6 is enough
    expected = "" if name == "default" else "--decay-weight 0.5"
    assert step_flags(AssignRewardsConfig, **options) == expected


def test_eval_reasoning_flags(name, config):
    options = reasoning_arguments(config)
    job = _runs_with(EvalReasoningConfig, options, "--model", "m", "--output", "o")
    r = config["evaluation"]["reasoning"]
    assert job.tasks == r["tasks"] and job.include_path == r["include_path"]
    assert (job.limit, job.num_fewshot, job.dtype) == (r["limit"], r["num_fewshot"], r["dtype"])
    assert int(job.batch_size) == r["batch_size"]
    assert job.apply_chat_template == (config["game"]["prompt_format"] == "chat")
    assert job.trust_remote_code == config["base_model"]["trust_remote_code"]
    assert job.device == options["device"]


def test_decay_weight_is_one_name_from_config_to_flag():
    """docs/design.md section 6's --decay-weight is the config key rewards.decay_weight."""
    parser = argparse.ArgumentParser()
    add_arguments(parser, RewardsSettings)
    assert from_arguments(RewardsSettings, parser.parse_args([])).decay_weight == 0.8
    args = parser.parse_args(["--decay-weight", "0.5"])
    assert from_arguments(RewardsSettings, args) == RewardsSettings(decay_weight=0.5)


def test_reasoning_limit_and_batch_size_parse_as_before():
    parser = argparse.ArgumentParser()
    add_arguments(parser, ReasoningSettings)
    args = parser.parse_args(["--limit", "0.5", "--batch-size", "auto", "--tasks", "a", "b"])
    assert (args.limit, args.batch_size, args.tasks) == (0.5, "auto", ["a", "b"])
    assert parser.parse_args(["--limit", "10"]).limit == 10
    assert parser.parse_args([]).batch_size == 8
