"""``spag play``'s settings are declared once: its flags come from ``PlayConfig``, and the
rules' flags from the package give every job the same command line as before."""

from __future__ import annotations

import argparse
import dataclasses
import shlex

import pytest

from spag.config import validate_config
from spag.device import family_device
from spag.errors import SpagInputError
from spag.game.play_settings import (
    PlayConfig,
    eval_play_arguments,
    selfplay_arguments,
    teacher_play_arguments,
)
from spag.game.settings import GameSettings
from spag.game.teacher import teacher_plays_locally
from spag.generation.settings import Sampling, SelfplaySettings
from spag.settings import add_arguments, cli_flags, from_arguments

REQUIRED = ["--model", "m", "--words", "w.txt", "--output", "o.parquet"]


def _parse(argv: list[str]) -> PlayConfig:
    p = argparse.ArgumentParser()
    add_arguments(p, PlayConfig)
    return from_arguments(PlayConfig, p.parse_args([*REQUIRED, *argv]))


# ---------------------------------------------------------------- the reference
# The rules' functions as rules/common.smk wrote them before the package gave the
# options: every job's `spag play` flags must stay exactly these.


def _ref_cli_args(**options):
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


def _ref_engine_args(config, family):
    s = config["selfplay"]
    options = dict(
        backend=s["backend"],
        max_turns=config["game"]["max_turns"],
        prompt_format=config["game"]["prompt_format"],
        max_length=s["max_length"],
        dtype=s["dtype"],
        trust_remote_code=config["base_model"]["trust_remote_code"],
        device=family_device(config, family),
    )
    if s["backend"] == "vllm":
        gpus = config["resources"][family]["gpus"]
        options["tensor_parallel_size"] = s["tensor_parallel_size"] or max(gpus, 1)
    else:
        options.update(kv_reuse_gib=s["kv_reuse_gib"], batch_memory_gib=s["batch_memory_gib"])
    return options


def _ref_vllm_memory(config, model, opponent=None):
    if config["selfplay"]["backend"] != "vllm":
        return {}
    return dict(gpu_memory_utilization=model, opponent_gpu_memory_utilization=opponent)


def _ref_play_args(config):
    s = config["selfplay"]
    return _ref_cli_args(
        **_ref_engine_args(config, "selfplay"),
        **_ref_vllm_memory(config, s["gpu_memory_utilization"]),
        max_new_tokens=s["max_new_tokens"],
        temperature=s["temperature"],
        top_k=s["top_k"],
        top_p=s["top_p"],
        batch_size=s["batch_size"],
    )


def _ref_eval_play_args(config):
    e = config["evaluation"]
    return _ref_cli_args(
        **_ref_engine_args(config, "evaluate"),
        **_ref_vllm_memory(
            config, e["gpu_memory_utilization"], e["opponent_gpu_memory_utilization"]
        ),
        max_new_tokens=e["max_new_tokens"],
        batch_size=e["batch_size"],
        greedy=True,
    )


def _ref_is_folder_player(value):
    return bool(value) and not value.startswith("openai:")


def _ref_teacher_local(config):
    t = config["data"]["teacher"]
    return _ref_is_folder_player(t["model"]) or _ref_is_folder_player(t["partner"])


def _ref_teacher_play_args(config, threads):
    t = config["data"]["teacher"]
    options = dict(
        model=t["model"],
        model_name="teacher",
        max_new_tokens=t["max_new_tokens"],
        temperature=t["temperature"],
        top_p=t["top_p"],
        top_k=t["top_k"],
        greedy=t["temperature"] == 0,
        max_turns=config["game"]["max_turns"],
    )
    if t["partner"]:
        options.update(opponent=t["partner"], opponent_name="partner")
        options["no_greedy"] = t["temperature"] > 0
    else:
        options["games_per_word"] = t["games_per_word"]
    if _ref_teacher_local(config):
        options.update(
            _ref_engine_args(config, "selfplay"),
            **_ref_vllm_memory(config, config["selfplay"]["gpu_memory_utilization"]),
            batch_size=config["selfplay"]["batch_size"],
        )
    flags = _ref_cli_args(**options)
    if _ref_teacher_local(config):
        flags += f" --threads {threads}"
    return flags


# ---------------------------------------------------------------- configs
ENDPOINT = "openai:http://127.0.0.1:8000/v1?model=teacher"
CONFIGS = {
    "default": {},
    "hf-set": {
        "game": {"max_turns": 3, "prompt_format": "chat"},
        "selfplay": {"batch_memory_gib": 1.5, "kv_reuse_gib": 0, "temperature": 0.7},
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


def _config(name: str, teacher: str | None = None) -> dict:
    raw = dict(CONFIGS[name])
    if teacher is not None:
        raw["data"] = {"imitation": "teacher", "teacher": TEACHERS[teacher]}
    return validate_config(raw)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_selfplay_and_evaluation_flags_are_the_rules_of_before(name):
    config = _config(name)
    assert cli_flags(**selfplay_arguments(config)) == _ref_play_args(config)
    assert cli_flags(**eval_play_arguments(config)) == _ref_eval_play_args(config)


@pytest.mark.parametrize("teacher", sorted(TEACHERS))
@pytest.mark.parametrize("name", ["default", "vllm"])
def test_teacher_flags_are_the_rules_of_before(name, teacher):
    config = _config(name, teacher)
    flags = cli_flags(**teacher_play_arguments(config))
    if teacher_plays_locally(config):
        flags += " --threads 4"
    assert teacher_plays_locally(config) == _ref_teacher_local(config)
    assert flags == _ref_teacher_play_args(config, 4)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_rule_flags_round_trip_through_the_cli(name):
    config = _config(name)
    s = config["selfplay"]
    played = _parse(shlex.split(cli_flags(**selfplay_arguments(config))))
    assert played.sampling == Sampling(
        max_new_tokens=s["max_new_tokens"],
        temperature=s["temperature"],
        top_k=s["top_k"],
        top_p=s["top_p"],
    )
    assert (played.backend, played.max_length, played.dtype) == (
        s["backend"],
        s["max_length"],
        s["dtype"],
    )
    assert played.max_turns == config["game"]["max_turns"]
    evaluated = _parse([*shlex.split(cli_flags(**eval_play_arguments(config))), "--opponent", "b"])
    assert evaluated.sampling.greedy
    assert evaluated.max_new_tokens == config["evaluation"]["max_new_tokens"]


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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--num-shards", "0"], "--num-shards must be at least 1"),
        (["--shard-index", "2", "--num-shards", "2"], "--shard-index 2 is out of range"),
        (["--max-turns", "0"], "--max-turns must be at least 1"),
        (["--top-k", "-1"], "--top-k must be >= 0"),
        (["--top-p", "0"], r"--top-p must be in \(0, 1\]"),
        (["--kv-reuse-gib", "-1"], "--kv-reuse-gib must be >= 0"),
        (["--games-per-word", "2", "--opponent", "b"], "--games-per-word applies to self-play"),
    ],
)
def test_bad_values_are_input_errors(argv, message):
    with pytest.raises(SpagInputError, match=message):
        _parse(argv)
