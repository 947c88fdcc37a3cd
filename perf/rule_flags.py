"""Every rule's `spag` flags under a range of configurations, one line each: run it with two
versions of the package and compare, so that a reshaping is seen to leave every job's
command line, and so Snakemake's params trigger, as it was.

    PYTHONPATH=OLD_CHECKOUT/workflow_scripts python perf/rule_flags.py > old.txt
    python perf/rule_flags.py > new.txt
    diff old.txt new.txt

The configurations: the embedded default, the shipped configs of Kuhn Poker and SmolLM2,
and overlays that turn on the paths those leave off (sampled evaluation games, vLLM,
teacher games with and without a partner, legal_po, non-default stage and reward keys).
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
ENDPOINT = "openai:http://127.0.0.1:9/v1?model=x"


def _yaml(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / name).read_text())


def _merge(base: dict, layer: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in layer.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if both else value
    return out


def variants() -> dict[str, dict[str, Any]]:
    kuhn = _yaml("configs/kuhn-poker-tiny.yaml")
    return {
        "default": {},
        "kuhn": kuhn,
        "smollm2": _yaml("configs/smollm2-135m.yaml"),
        "kuhn-smollm2": _yaml("configs/kuhn-poker-smollm2.yaml"),
        "sampled": {
            "evaluation": {"sampled_games_per_secret": 2},
            "selfplay": {"temperature": 0.9, "top_p": 0.9, "games_per_secret": 2},
        },
        "vllm": {
            "selfplay": {
                "backend": "vllm",
                "vllm_batch_invariant": True,
                "tensor_parallel_size": 2,
            },
            "evaluation": {"sampled_games_per_secret": 1},
        },
        "teacher": {"data": {"imitation": "teacher", "teacher": {"model": ENDPOINT}}},
        "teacher-partner-greedy": {
            "data": {
                "imitation": "teacher",
                "teacher": {"model": ENDPOINT, "partner": ENDPOINT, "temperature": 0},
            }
        },
        "teacher-partner": {
            "data": {
                "imitation": "teacher",
                "teacher": {
                    "model": ENDPOINT,
                    "partner": ENDPOINT,
                    "temperature": 0.8,
                    "top_k": 20,
                },
            }
        },
        "kuhn-legal": {
            **kuhn,
            "spag": {"objective": "legal_po", "legal_mass_coeff": 0.5, "group_by_length": False},
        },
        "stages": {
            "spag": {
                "sft_coeff": 0.3,
                "group_by_length": False,
                "padding_free": False,
                "kl_coeff": 0.3,
            },
            "imitation": {"weight_decay": 0.1},
            "game": {"prompt_format": "chat"},
            "base_model": {"trust_remote_code": True},
            "rewards": {"scheme": "rae", "drop_zero_advantage": True},
        },
    }


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    from spag.commands.assign_rewards import AssignRewardsConfig
    from spag.commands.eval_reasoning import EvalReasoningConfig
    from spag.commands.target_words import TargetWordsConfig
    from spag.config import validate_config
    from spag.data.words import words_arguments
    from spag.evaluation.reasoning import reasoning_arguments
    from spag.game.play_settings import (
        PlayConfig,
        eval_play_arguments,
        eval_sampled_play_arguments,
        selfplay_arguments,
        teacher_play_arguments,
    )
    from spag.game.rewards import rewards_arguments
    from spag.settings import step_flags
    from spag.training.settings import ScoreRefConfig, TrainConfig, score_arguments, stage_arguments

    base = _yaml("config.yaml")
    for name, overlay in variants().items():
        # A game that deals its secrets refuses the word keys config.yaml sets.
        dealt = "kuhn" in name
        config = validate_config(
            _merge({k: v for k, v in base.items() if not (dealt and k == "words")}, overlay)
        )
        print(f"== {name}")
        print("play", step_flags(PlayConfig, **selfplay_arguments(config)))
        print("eval", step_flags(PlayConfig, **eval_play_arguments(config)))
        print("sampled", step_flags(PlayConfig, **eval_sampled_play_arguments(config)))
        if config["data"]["imitation"] == "teacher":
            print("teacher", step_flags(PlayConfig, **teacher_play_arguments(config)))
        for stage in ("imitation", "spag"):
            print("train", stage, step_flags(TrainConfig, **stage_arguments(config, stage)))
            print("score", stage, step_flags(ScoreRefConfig, **score_arguments(config, stage)))
        print("rewards", step_flags(AssignRewardsConfig, **rewards_arguments(config)))
        print("reasoning", step_flags(EvalReasoningConfig, **reasoning_arguments(config)))
        print("words", step_flags(TargetWordsConfig, **words_arguments(config)))


if __name__ == "__main__":
    main()
