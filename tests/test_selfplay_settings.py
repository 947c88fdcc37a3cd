"""``spag play``'s settings are declared once: its flags come from ``PlayConfig``, and the
rules' flags from the package give every job the same command line as before."""

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


# Teachers whose model or partner is a folder: played here, on the self-play engine.
LOCAL_TEACHERS = {"folder", "folder-partner", "endpoint-folder-partner"}

# ---------------------------------------------------------------- the expected flags
# The command lines the rules give `spag play` (self-play, evaluation, and the teacher's
# games with its `--threads 4`), as they were when the rules built them themselves:
# every job's flags must stay exactly these.
PLAY_FLAGS = {
    "default": (
        "--backend hf --max-turns 5 --prompt-format raw --max-length 2048 --dtype auto "
        "--device cpu --kv-reuse-gib 2 --max-new-tokens 256 --temperature 1.2 --top-k 50 "
        "--top-p 1.0 --batch-size 64"
    ),
    "hf-set": (
        "--backend hf --max-turns 3 --prompt-format chat --max-length 2048 --dtype auto "
        "--trust-remote-code --device cuda --kv-reuse-gib 0 --batch-memory-gib 1.5 "
        "--max-new-tokens 256 --temperature 0.7 --top-k 50 --top-p 1.0 --batch-size 64"
    ),
    "vllm": (
        "--backend vllm --max-turns 5 --prompt-format raw --max-length 2048 --dtype auto "
        "--device cuda --tensor-parallel-size 4 --gpu-memory-utilization 0.9 --max-new-tokens 256 "
        "--temperature 1.2 --top-k 50 --top-p 1.0 --batch-size 64"
    ),
    "vllm-pinned": (
        "--backend vllm --max-turns 5 --prompt-format raw --max-length 2048 --dtype auto "
        "--device cpu --tensor-parallel-size 2 --gpu-memory-utilization 0.8 --max-new-tokens 256 "
        "--temperature 1.2 --top-k 50 --top-p 1.0 --batch-size 64"
    ),
}
EVAL_PLAY_FLAGS = {
    "default": (
        "--backend hf --max-turns 5 --prompt-format raw --max-length 2048 --dtype auto "
        "--device cpu --kv-reuse-gib 2 --max-new-tokens 256 --batch-size 64 --greedy"
    ),
    "hf-set": (
        "--backend hf --max-turns 3 --prompt-format chat --max-length 2048 --dtype auto "
        "--trust-remote-code --device cpu --kv-reuse-gib 0 --batch-memory-gib 1.5 "
        "--max-new-tokens 64 --batch-size 8 --greedy"
    ),
    "vllm": (
        "--backend vllm --max-turns 5 --prompt-format raw --max-length 2048 --dtype auto "
        "--device cpu --tensor-parallel-size 1 --gpu-memory-utilization 0.45 "
        "--opponent-gpu-memory-utilization 0.45 --max-new-tokens 256 --batch-size 64 --greedy"
    ),
    "vllm-pinned": (
        "--backend vllm --max-turns 5 --prompt-format raw --max-length 2048 --dtype auto "
        "--device cuda --tensor-parallel-size 2 --gpu-memory-utilization 0.5 "
        "--opponent-gpu-memory-utilization 0.3 --max-new-tokens 256 --batch-size 64 --greedy"
    ),
}
TEACHER_FLAGS = {
    ("default", "endpoint"): (
        "--model 'openai:http://127.0.0.1:8000/v1?model=teacher' --model-name teacher "
        "--max-new-tokens 256 --temperature 1.0 --top-p 1.0 --top-k 0 --max-turns 5 "
        "--games-per-word 1"
    ),
    ("default", "endpoint-folder-partner"): (
        "--model 'openai:http://127.0.0.1:8000/v1?model=teacher' --model-name teacher "
        "--max-new-tokens 256 --temperature 1.0 --top-p 1.0 --top-k 0 --max-turns 5 "
        "--opponent results/imitation_model --opponent-name partner --no-greedy --backend hf "
        "--prompt-format raw --max-length 2048 --dtype auto --device cpu --kv-reuse-gib 2 "
        "--batch-size 64 --threads 4"
    ),
    ("default", "endpoint-greedy"): (
        "--model 'openai:http://127.0.0.1:8000/v1?model=teacher' --model-name teacher "
        "--max-new-tokens 256 --temperature 0 --top-p 1.0 --top-k 0 --greedy --max-turns 5 "
        "--games-per-word 1"
    ),
    ("default", "endpoint-partner-greedy"): (
        "--model 'openai:http://127.0.0.1:8000/v1?model=teacher' --model-name teacher "
        "--max-new-tokens 256 --temperature 0 --top-p 1.0 --top-k 0 --greedy --max-turns 5 "
        "--opponent 'openai:http://127.0.0.1:8000/v1?model=teacher' --opponent-name partner"
    ),
    ("default", "folder"): (
        "--model results/base_model --model-name teacher --max-new-tokens 256 --temperature 1.0 "
        "--top-p 1.0 --top-k 50 --max-turns 5 --games-per-word 3 --backend hf --prompt-format raw "
        "--max-length 2048 --dtype auto --device cpu --kv-reuse-gib 2 --batch-size 64 --threads 4"
    ),
    ("default", "folder-partner"): (
        "--model results/base_model --model-name teacher --max-new-tokens 256 --temperature 1.0 "
        "--top-p 1.0 --top-k 0 --max-turns 5 "
        "--opponent 'openai:http://127.0.0.1:8000/v1?model=teacher' --opponent-name partner "
        "--no-greedy --backend hf --prompt-format raw --max-length 2048 --dtype auto --device cpu "
        "--kv-reuse-gib 2 --batch-size 64 --threads 4"
    ),
    ("vllm", "endpoint"): (
        "--model 'openai:http://127.0.0.1:8000/v1?model=teacher' --model-name teacher "
        "--max-new-tokens 256 --temperature 1.0 --top-p 1.0 --top-k 0 --max-turns 5 "
        "--games-per-word 1"
    ),
    ("vllm", "endpoint-folder-partner"): (
        "--model 'openai:http://127.0.0.1:8000/v1?model=teacher' --model-name teacher "
        "--max-new-tokens 256 --temperature 1.0 --top-p 1.0 --top-k 0 --max-turns 5 "
        "--opponent results/imitation_model --opponent-name partner --no-greedy --backend vllm "
        "--prompt-format raw --max-length 2048 --dtype auto --device cuda "
        "--tensor-parallel-size 4 --gpu-memory-utilization 0.9 --batch-size 64 --threads 4"
    ),
    ("vllm", "endpoint-greedy"): (
        "--model 'openai:http://127.0.0.1:8000/v1?model=teacher' --model-name teacher "
        "--max-new-tokens 256 --temperature 0 --top-p 1.0 --top-k 0 --greedy --max-turns 5 "
        "--games-per-word 1"
    ),
    ("vllm", "endpoint-partner-greedy"): (
        "--model 'openai:http://127.0.0.1:8000/v1?model=teacher' --model-name teacher "
        "--max-new-tokens 256 --temperature 0 --top-p 1.0 --top-k 0 --greedy --max-turns 5 "
        "--opponent 'openai:http://127.0.0.1:8000/v1?model=teacher' --opponent-name partner"
    ),
    ("vllm", "folder"): (
        "--model results/base_model --model-name teacher --max-new-tokens 256 --temperature 1.0 "
        "--top-p 1.0 --top-k 50 --max-turns 5 --games-per-word 3 --backend vllm "
        "--prompt-format raw --max-length 2048 --dtype auto --device cuda "
        "--tensor-parallel-size 4 --gpu-memory-utilization 0.9 --batch-size 64 --threads 4"
    ),
    ("vllm", "folder-partner"): (
        "--model results/base_model --model-name teacher --max-new-tokens 256 --temperature 1.0 "
        "--top-p 1.0 --top-k 0 --max-turns 5 "
        "--opponent 'openai:http://127.0.0.1:8000/v1?model=teacher' --opponent-name partner "
        "--no-greedy --backend vllm --prompt-format raw --max-length 2048 --dtype auto "
        "--device cuda --tensor-parallel-size 4 --gpu-memory-utilization 0.9 --batch-size 64 "
        "--threads 4"
    ),
}


def _config(name: str, teacher: str | None = None) -> dict:
    raw = dict(CONFIGS[name])
    if teacher is not None:
        raw["data"] = {"imitation": "teacher", "teacher": TEACHERS[teacher]}
    return validate_config(raw)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_selfplay_and_evaluation_flags_are_the_rules_of_before(name):
    config = _config(name)
    assert _before(cli_flags(**selfplay_arguments(config))) == PLAY_FLAGS[name]
    assert _before(cli_flags(**eval_play_arguments(config))) == EVAL_PLAY_FLAGS[name]


def _before(flags: str) -> str:
    """The flags as the rules wrote them before ``--game`` (config game.name) was added."""
    assert " --game taboo " in f" {flags} "
    return f" {flags} ".replace(" --game taboo ", " ").strip()


@pytest.mark.parametrize("teacher", sorted(TEACHERS))
@pytest.mark.parametrize("name", ["default", "vllm"])
def test_teacher_flags_are_the_rules_of_before(name, teacher):
    config = _config(name, teacher)
    flags = _before(cli_flags(**teacher_play_arguments(config)))
    if teacher_plays_locally(config):
        flags += " --threads 4"
    assert teacher_plays_locally(config) == (teacher in LOCAL_TEACHERS)
    assert flags == TEACHER_FLAGS[name, teacher]


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
