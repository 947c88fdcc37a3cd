"""Training settings are declared once: the schema, the CLI and the rules' flags agree."""

from __future__ import annotations

import argparse
import dataclasses
import shlex

import pytest

from spag.config import load_schema, validate_config
from spag.training.settings import (
    METHOD_DEFAULTS,
    STAGE_METHOD,
    StageSettings,
    TrainConfig,
    add_arguments,
    from_arguments,
    stage_arguments,
    stage_keys,
)

REQUIRED = ["--method", "sft_kl", "--model", "m", "--samples", "s.parquet", "--output", "o"]
REQUIRED += ["--checkpoint-dir", "c", "--loss-log", "l.tsv"]


def _parse(argv: list[str]) -> TrainConfig:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return from_arguments(p.parse_args(argv))


def _cli_args(options: dict) -> list[str]:
    # The rules render options the same way (rules/common.smk: cli_args).
    out = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    return out


def test_schema_lists_the_stage_settings_with_the_same_defaults():
    props = load_schema()["$defs"]["training"]["properties"]
    assert list(props) == stage_keys()
    for f in dataclasses.fields(StageSettings):
        assert props[f.name].get("default") == f.default, f.name


def test_cli_defaults_are_the_dataclass_defaults():
    parsed = _parse(REQUIRED)
    for f in dataclasses.fields(TrainConfig):
        if f.default is not dataclasses.MISSING:
            assert getattr(parsed, f.name) == f.default, f.name


@pytest.mark.parametrize("stage", ["imitation", "spag"])
@pytest.mark.parametrize("changed", [{}, {"group_by_length": False, "bf16": True, "save_steps": 7}])
def test_rule_flags_round_trip_through_the_cli(stage, changed):
    config = validate_config({stage: dict(changed)})
    argv = _cli_args(stage_arguments(config, stage))
    argv += ["--model", "m", "--samples", "s", "--output", "o", "--checkpoint-dir", "c"]
    parsed = _parse([*argv, "--loss-log", "l"])
    assert parsed.method == STAGE_METHOD[stage]
    for key in stage_keys():
        if key in ("sft_coeff", "clip_eps") and stage == "imitation":
            continue
        assert getattr(parsed, key) == config[stage][key], key
    assert parsed.seed == config["seed"]
    assert parsed.prompt_format == config["game"]["prompt_format"]
    # The values survive shell quoting as the rules write them.
    assert shlex.split(shlex.join(argv)) == argv


def test_stage_defaults_come_from_the_method():
    config = validate_config({})
    for stage, method in STAGE_METHOD.items():
        for key, value in METHOD_DEFAULTS[method].items():
            assert config[stage][key] == value


def test_a_missing_required_setting_is_refused():
    with pytest.raises(TypeError):
        TrainConfig(method="sft_kl", model="m")
