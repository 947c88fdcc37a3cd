"""The options the rules pass to `spag target-words`, `spag assign-rewards` and
`spag eval-reasoning` come from the steps' settings, rendered as the rules did."""

from __future__ import annotations

import argparse
import shlex

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


def _flags(**options) -> str:
    # What the rules rendered before the steps declared their settings.
    parts = []
    for key, value in options.items():
        if value is None or value is False or value == []:
            continue
        flag = f"--{key.replace('_', '-')}"
        if value is True:
            parts.append(flag)
        elif isinstance(value, (list, tuple)):
            parts.append(" ".join([flag, *(shlex.quote(str(v)) for v in value)]))
        else:
            parts.append(f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)


@pytest.fixture(params=["default", "changed"])
def config(request):
    return validate_config({} if request.param == "default" else CHANGED)


def test_target_words_flags(config):
    w = config["words"]
    expected = _flags(
        num_train=w["num_train"],
        num_test=w["num_test"],
        min_length=w["min_length"],
        max_length=w["max_length"],
        seed=config["seed"],
    )
    assert cli_flags(**words_arguments(config)) == expected


def test_assign_rewards_flags(config):
    # The rule wrote `--decay-weight {params.decay}`.
    expected = f"--decay-weight {config['rewards']['decay']}"
    assert cli_flags(**rewards_arguments(config)) == expected


def test_eval_reasoning_flags(config):
    r = config["evaluation"]["reasoning"]
    expected = _flags(
        tasks=r["tasks"],
        include_path=r["include_path"],
        limit=r["limit"],
        num_fewshot=r["num_fewshot"],
        batch_size=r["batch_size"],
        dtype=r["dtype"],
        apply_chat_template=config["game"]["prompt_format"] == "chat",
        trust_remote_code=config["base_model"]["trust_remote_code"],
        device="cuda" if config["resources"]["evaluate"]["gpus"] > 0 else "cpu",
    )
    assert cli_flags(**reasoning_arguments(config)) == expected


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
