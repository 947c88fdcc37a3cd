"""``spag play``'s settings are declared once: its flags come from ``PlayConfig``, the
rules' flags from the package are the values the step runs with, and a knob at its
default leaves every job's command line as it was."""

from __future__ import annotations

import argparse
import dataclasses
import shlex

import pytest

from spag.config import validate_config
from spag.errors import SpagInputError
from spag.game.play_settings import (
    PlayConfig,
    eval_play_arguments,
    eval_sampled_play_arguments,
    selfplay_arguments,
    teacher_play_arguments,
)
from spag.game.settings import GameSettings
from spag.game.teacher import teacher_plays_locally
from spag.generation.settings import Sampling, SelfplaySettings
from spag.settings import add_arguments, from_arguments, opt, step_flags

REQUIRED = ["--model", "m", "--words", "w.txt", "--output", "o.parquet"]


def _parse(argv: list[str]) -> PlayConfig:
    p = argparse.ArgumentParser()
    add_arguments(p, PlayConfig)
    return from_arguments(PlayConfig, p.parse_args([*REQUIRED, *argv]))


# ---------------------------------------------------------------- configs
ENDPOINT = "openai:http://127.0.0.1:8000/v1?model=teacher"
CONFIGS = {
    "default": {},
    "hf-set": {
        "game": {"max_turns": 3, "prompt_format": "chat"},
        "selfplay": {
            "batch_memory_gib": 1.5,
            "kv_reuse_gib": 0,
            "temperature": 0.7,
            "cuda_graphs": False,
        },
        "base_model": {"trust_remote_code": True},
        "evaluation": {"max_new_tokens": 64, "batch_size": 8},
        "resources": {"selfplay": {"gpus": 1}},
    },
    "vllm": {"selfplay": {"backend": "vllm"}, "resources": {"selfplay": {"gpus": 4}}},
    "vllm-pinned": {
        "selfplay": {"backend": "vllm", "tensor_parallel_size": 2, "gpu_memory_utilization": 0.8},
        "evaluation": {"gpu_memory_utilization": 0.5, "opponent_gpu_memory_utilization": 0.3},
        "resources": {"evaluate": {"gpus": 2}},
    },
}
TEACHERS = {
    "endpoint": {"model": ENDPOINT},
    "endpoint-greedy": {"model": ENDPOINT, "temperature": 0},
    "folder": {"model": "results/base_model", "games_per_word": 3, "top_k": 50},
    "folder-partner": {"model": "results/base_model", "partner": ENDPOINT},
    "endpoint-partner-greedy": {"model": ENDPOINT, "partner": ENDPOINT, "temperature": 0},
    "endpoint-folder-partner": {"model": ENDPOINT, "partner": "results/imitation_model"},
}


# Teachers whose model or partner is a folder: played here, on the self-play engine.
LOCAL_TEACHERS = {"folder", "folder-partner", "endpoint-folder-partner"}


def _config(name: str, teacher: str | None = None) -> dict:
    raw = dict(CONFIGS[name])
    if teacher is not None:
        raw["data"] = {"imitation": "teacher", "teacher": TEACHERS[teacher]}
    return validate_config(raw)


def _played(options: dict, *extra: str) -> PlayConfig:
    """The step's settings when it is run with the rule's flags."""
    return _parse([*shlex.split(step_flags(PlayConfig, **options)), *extra])


def _check_runs_with(options: dict, played: PlayConfig) -> None:
    """Every option the rule gives is the value the step runs with, whether its flag is
    written or left out at the step's default."""
    for key, value in options.items():
        if key == "greedy":
            assert played.sampling.greedy == value, key
        elif key == "no_greedy":
            assert played.sampling.greedy is (not value), key
        elif key.startswith("no_"):
            assert getattr(played, key[3:]) is (not value), key
        else:
            assert getattr(played, key) == value, (key, getattr(played, key), value)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_selfplay_and_evaluation_flags_are_what_the_step_runs_with(name):
    config = _config(name)
    config["evaluation"]["sampled_games_per_secret"] = 2  # else no sampled games are played
    _check_runs_with(selfplay_arguments(config), _played(selfplay_arguments(config)))
    for options in (eval_play_arguments(config), eval_sampled_play_arguments(config)):
        _check_runs_with(options, _played(options, "--opponent", "b"))


@pytest.mark.parametrize("teacher", sorted(TEACHERS))
@pytest.mark.parametrize("name", ["default", "vllm"])
def test_teacher_flags_are_what_the_step_runs_with(name, teacher):
    config = _config(name, teacher)
    options = teacher_play_arguments(config)
    assert teacher_plays_locally(config) == (teacher in LOCAL_TEACHERS)
    _check_runs_with(options, _played(options))


def test_a_knob_at_its_default_is_left_out():
    flags = step_flags(PlayConfig, **selfplay_arguments(_config("default")))
    for knob in ("--temperature", "--top-k", "--top-p", "--max-new-tokens", "--kv-reuse-gib",
                 "--backend", "--game", "--max-turns", "--dtype", "--prompt-format"):  # fmt: skip
        assert knob not in flags, (knob, flags)
    assert flags == "--max-length 2048 --device cpu --batch-size 64"
    set_flags = step_flags(PlayConfig, **selfplay_arguments(_config("hf-set")))
    assert "--temperature 0.7" in set_flags and "--kv-reuse-gib 0" in set_flags


def test_adding_a_knob_at_its_default_changes_no_command_line():
    """A new sampling knob (min_p, as a researcher would add it): every job's command line,
    and so Snakemake's params trigger, stays as it was until a config sets it."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class WithMinP(PlayConfig):
        min_p: float = opt(0.0, "drop tokens below min_p x the top token's probability", ge=0)

    for name in CONFIGS:
        config = _config(name)
        config["evaluation"]["sampled_games_per_secret"] = 2
        for arguments in (selfplay_arguments, eval_play_arguments, eval_sampled_play_arguments):
            options = arguments(config)
            before = step_flags(PlayConfig, **options)
            assert step_flags(WithMinP, **options, min_p=0.0) == before
            assert step_flags(WithMinP, **options, min_p=0.05) == before + " --min-p 0.05"


def test_cli_defaults_are_the_declared_defaults():
    played = _parse([])
    for f in dataclasses.fields(PlayConfig):
        if f.default is not dataclasses.MISSING:
            assert getattr(played, f.name) == f.default, f.name
    # Self-play samples as the config's defaults say; against an opponent, greedily.
    assert played.sampling == Sampling() and not played.sampling.greedy
    assert played.max_turns == GameSettings.max_turns
    assert played.prompt_format == GameSettings.prompt_format
    assert played.kv_reuse_gib == SelfplaySettings.kv_reuse_gib
    assert _parse(["--opponent", "b"]).sampling.greedy
    assert not _parse(["--opponent", "b", "--no-greedy"]).sampling.greedy
    sampled = _parse(["--opponent", "b", "--no-greedy", "--games-per-word", "3"])
    assert sampled.games_per_word == 3 and sampled.sampling.samples


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--num-shards", "0"], "--num-shards must be >= 1, got 0"),
        (["--shard-index", "2", "--num-shards", "2"], "--shard-index 2 is out of range"),
        (["--max-turns", "0"], "--max-turns must be >= 1, got 0"),
        (["--top-k", "-1"], "--top-k must be >= 0"),
        (["--top-p", "0"], r"--top-p must be in \(0, 1\]"),
        (["--kv-reuse-gib", "-1"], "--kv-reuse-gib must be >= 0"),
        (["--games-per-word", "2", "--opponent", "b"], "greedy ones would repeat"),
        (
            ["--games-per-word", "2", "--opponent", "b", "--no-greedy", "--temperature", "0"],
            "greedy ones would repeat",
        ),
    ],
)
def test_bad_values_are_input_errors(argv, message):
    with pytest.raises(SpagInputError, match=message):
        _parse(argv)
