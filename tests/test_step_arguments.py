"""The options the rules pass to `spag target-words`, `spag assign-rewards` and
`spag eval-reasoning` come from the steps' settings, rendered as the rules did."""

from __future__ import annotations

import argparse

import pytest

from spag.config import validate_config
from spag.data.words import words_arguments
from spag.evaluation.reasoning import ReasoningSettings, reasoning_arguments
from spag.game.rewards import RewardsSettings, rewards_arguments
from spag.settings import add_arguments, cli_flags, from_arguments

CHANGED = {
    "seed": 7,
    "words": {"num_train": 20, "num_test": 5, "min_length": 4, "max_length": 9},
    "rewards": {"decay": 0.5},
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


# What the rules rendered before the steps declared their settings.
WORDS_FLAGS = {
    "default": "--num-train 48 --num-test 16 --min-length 3 --max-length 12 --seed 42",
    "changed": "--num-train 20 --num-test 5 --min-length 4 --max-length 9 --seed 7",
}
# The rule wrote `--decay-weight {params.decay}`.
REWARDS_FLAGS = {
    "default": "--scheme winners --decay-weight 0.8",
    "changed": "--scheme winners --decay-weight 0.5",
}
REASONING_FLAGS = {
    "default": (
        "--tasks spag_tiny_reasoning --include-path data/lm_eval_tasks --batch-size 8 "
        "--dtype auto --device cpu"
    ),
    "changed": (
        "--tasks arc_easy 'my task' --limit 20 --num-fewshot 0 --batch-size 4 --dtype bfloat16 "
        "--apply-chat-template --trust-remote-code --device cuda"
    ),
}


@pytest.fixture(params=["default", "changed"])
def name(request):
    return request.param


@pytest.fixture
def config(name):
    return validate_config({} if name == "default" else CHANGED)


def test_target_words_flags(name, config):
    assert cli_flags(**words_arguments(config)) == WORDS_FLAGS[name]


def test_assign_rewards_flags(name, config):
    assert cli_flags(**rewards_arguments(config)) == REWARDS_FLAGS[name]


def test_eval_reasoning_flags(name, config):
    assert cli_flags(**reasoning_arguments(config)) == REASONING_FLAGS[name]


def test_decay_keeps_its_flag_name():
    parser = argparse.ArgumentParser()
    add_arguments(parser, RewardsSettings)
    assert from_arguments(RewardsSettings, parser.parse_args([])).decay == 0.8
    args = parser.parse_args(["--decay-weight", "0.5"])
    assert from_arguments(RewardsSettings, args) == RewardsSettings(decay=0.5)


def test_reasoning_limit_and_batch_size_parse_as_before():
    parser = argparse.ArgumentParser()
    add_arguments(parser, ReasoningSettings)
    args = parser.parse_args(["--limit", "0.5", "--batch-size", "auto", "--tasks", "a", "b"])
    assert (args.limit, args.batch_size, args.tasks) == (0.5, "auto", ["a", "b"])
    assert parser.parse_args(["--limit", "10"]).limit == 10
    assert parser.parse_args([]).batch_size == 8
