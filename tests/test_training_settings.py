"""Training settings are declared once: the schema, the CLI and the rules' flags agree."""

from __future__ import annotations

import argparse
import dataclasses
import shlex

import pytest

from spag.commands import score_ref
from spag.config import load_schema, validate_config
from spag.errors import SpagInputError
from spag.ops.device import family_device
from spag.settings import add_arguments, from_arguments, step_flags
from spag.training.objectives import OBJECTIVES, STAGE_OBJECTIVE, paper_defaults
from spag.training.settings import (
    ScoreRefConfig,
    ScoringSettings,
    StageSettings,
    TrainConfig,
    argument_values,
    score_arguments,
    stage_arguments,
)

# The per-stage config keys (imitation.*, spag.*), in declaration order.
STAGE_KEYS = [f.name for f in dataclasses.fields(StageSettings)]
REQUIRED = ["--objective", "sft_kl", "--model", "m", "--samples", "s.parquet", "--output", "o"]
REQUIRED += ["--checkpoint-dir", "c", "--loss-log", "l.tsv"]


def _parse(argv: list[str]) -> TrainConfig:
    p = argparse.ArgumentParser()
    add_arguments(p, TrainConfig)
    return from_arguments(TrainConfig, p.parse_args(argv))


def _cli_args(options: dict) -> list[str]:
    # As the rules render them (rules/resources.smk).
    return shlex.split(step_flags(TrainConfig, **options))


def test_schema_lists_the_stage_settings_with_the_same_defaults():
    props = load_schema()["$defs"]["training"]["properties"]
    assert list(props) == STAGE_KEYS
    for f in dataclasses.fields(StageSettings):
        assert props[f.name].get("default") == f.default, f.name


def test_cli_defaults_are_the_dataclass_defaults():
    parsed = _parse(REQUIRED)
    for f in dataclasses.fields(TrainConfig):
        defaulted_by_objective = {"objective", *paper_defaults("sft_kl")}
        if f.default is not dataclasses.MISSING and f.name not in defaulted_by_objective:
            assert getattr(parsed, f.name) == f.default, f.name
    # Unset, the learning rate and KL coefficient are the method's.
    for method, defaults in ((m, paper_defaults(m)) for m in OBJECTIVES):
        parsed = _parse([*REQUIRED, "--objective", method])
        for key, value in defaults.items():
            assert getattr(parsed, key) == value, (method, key)
    assert _parse([*REQUIRED, "--kl-coeff", "0.3"]).kl_coeff == 0.3


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--warmup-ratio", "1.0"], "--warmup-ratio must be in"),
        (["--per-device-batch-size", "0"], "--per-device-batch-size must be >= 1"),
        (["--save-steps", "0"], "--save-steps must be >= 1"),
    ],
)
def test_invalid_settings_are_refused_when_parsed(argv, message):
    with pytest.raises(SpagInputError, match=message):
        _parse([*REQUIRED, *argv])


def test_the_trainer_arguments_take_every_setting_by_its_declared_name():
    parsed = _parse([*REQUIRED, "--per-device-batch-size", "3", "--lr-scheduler", "linear"])
    names = {
        "per_device_train_batch_size", "lr_scheduler_type", "warmup_steps", "output_dir",
        "activation_checkpointing", "learning_rate", "seed", "kl_coeff", "deepspeed", "tf32",
    }  # fmt: skip
    values = argument_values(parsed, names)
    assert values["per_device_train_batch_size"] == 3
    assert values["lr_scheduler_type"] == "linear"
    assert values["warmup_steps"] == parsed.warmup_ratio
    assert values["output_dir"] == parsed.checkpoint_dir
    assert values["activation_checkpointing"] is False
    assert values["learning_rate"] == paper_defaults("sft_kl")["learning_rate"]
    # Set up by the run (a shipped config's name here, its file there).
    assert "deepspeed" not in values and "tf32" not in values


@pytest.mark.parametrize("stage", ["imitation", "spag"])
@pytest.mark.parametrize("changed", [{}, {"group_by_length": False, "bf16": True, "save_steps": 7}])
def test_rule_flags_round_trip_through_the_cli(stage, changed):
    # bf16 is trained under DeepSpeed and scored in bfloat16 (the config refuses it else)
    layers = {"scoring": {"dtype": "bfloat16"}} if changed.get("bf16") else {}
    for name in STAGE_OBJECTIVE if changed.get("bf16") else ():
        layers[name] = {"bf16": True, "deepspeed": "zero3"}
    layers.setdefault(stage, {}).update(changed)
    config = validate_config(layers)
    argv = _cli_args(stage_arguments(config, stage))
    argv += ["--model", "m", "--samples", "s", "--output", "o", "--checkpoint-dir", "c"]
    parsed = _parse([*argv, "--loss-log", "l"])
    assert parsed.objective == STAGE_OBJECTIVE[stage]
    for key in STAGE_KEYS:
        if key in ("sft_coeff", "clip_eps") and stage == "imitation":
            continue
        assert getattr(parsed, key) == config[stage][key], key
    assert parsed.seed == config["seed"]
    assert parsed.prompt_format == config["game"]["prompt_format"]
    # The values survive shell quoting as the rules write them.
    assert shlex.split(shlex.join(argv)) == argv


def test_stage_defaults_come_from_the_method():
    config = validate_config({})
    for stage, objective in STAGE_OBJECTIVE.items():
        assert config[stage]["objective"] == objective
        for key, value in paper_defaults(objective).items():
            assert config[stage][key] == value


def test_a_missing_required_setting_is_refused():
    with pytest.raises(TypeError):
        TrainConfig(objective="sft_kl", model="m")


def test_scoring_section_defaults_are_the_schema_defaults():
    props = load_schema()["properties"]["scoring"]["properties"]
    fields = dataclasses.fields(ScoringSettings)
    assert list(props) == [f.name for f in fields]
    for f in fields:
        assert props[f.name]["default"] == f.default, f.name


def _parse_score(argv: list[str]) -> ScoreRefConfig:
    p = argparse.ArgumentParser()
    score_ref.add_arguments(p)
    return from_arguments(ScoreRefConfig, p.parse_args(argv))


@pytest.mark.parametrize("stage", ["imitation", "spag"])
@pytest.mark.parametrize(
    "changed",
    [
        {},
        {
            # bfloat16 scores for stages that train bf16 under DeepSpeed (else refused)
            "scoring": {"batch_size": 3, "dtype": "bfloat16"},
            "game": {"prompt_format": "chat"},
            "base_model": {"trust_remote_code": True},
            "imitation": {
                "max_length": 512,
                "padding_free": False,
                "bf16": True,
                "deepspeed": "zero3",
            },
            "spag": {"max_length": 768, "padding_free": False, "bf16": True, "deepspeed": "zero3"},
        },
    ],
)
def test_score_flags_round_trip_through_the_cli(stage, changed):
    config = validate_config(dict(changed))
    options = score_arguments(config, stage)
    # What the rules passed before the settings were declared once.
    assert options == {
        "batch_size": config["scoring"]["batch_size"],
        "dtype": config["scoring"]["dtype"],
        "max_length": config[stage]["max_length"],
        "no_padding_free": not config[stage]["padding_free"],
        "prompt_format": config["game"]["prompt_format"],
        "trust_remote_code": config["base_model"]["trust_remote_code"],
        "device": family_device(config, "score"),
    }
    argv = shlex.split(step_flags(ScoreRefConfig, **options))
    argv += ["--model", "m", "--samples", "s", "--output", "o"]
    parsed = _parse_score(argv)
    assert parsed.batch_size == config["scoring"]["batch_size"]
    assert parsed.dtype == config["scoring"]["dtype"]
    assert parsed.max_length == config[stage]["max_length"]
    assert parsed.padding_free == config[stage]["padding_free"]
    assert parsed.prompt_format == config["game"]["prompt_format"]
    assert parsed.trust_remote_code == config["base_model"]["trust_remote_code"]
    assert parsed.device == family_device(config, "score")
