"""Prompt texts (docs/design.md section 5): the play prompt, randomised training prompts, the file."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from spag.errors import SpagInputError
from spag.game.base import PromptsFile
from spag.game.taboo import GUESS_PHRASE, TABOO, read_prompts

REPO = Path(__file__).resolve().parents[1]
HISTORY = [
    {"role": "attacker", "content": "What do you keep in a kitchen drawer?"},
    {"role": "defender", "content": "Spoons, mostly."},
]


def load_prompts(path=None):
    return TABOO.load_prompts(path)


def training_prompt(prompts, history, role, seed):
    return TABOO.training_prompt(prompts, history, role, "knife", 5, random.Random(seed).random())


@pytest.fixture(scope="module")
def prompts():
    return load_prompts()


def test_default_file_is_the_shipped_data_file():
    shipped = Path(TABOO.default_prompts_path())
    assert shipped == REPO / "data" / "prompts.yaml" and not shipped.is_symlink()
    assert read_prompts(PromptsFile.read(shipped)) == load_prompts()


def test_play_prompt_layout(prompts):
    text = prompts.play_prompt(HISTORY, "attacker", "knife", 4)
    assert (
        "  - attacker: What do you keep in a kitchen drawer?\n  - defender: Spoons, mostly." in text
    )
    assert "knife" in text and "4" in text and "{" not in text
    assert text.endswith(prompts.play_cue)
    defender = prompts.play_prompt(HISTORY, "defender", "knife", 4)
    assert "knife" not in defender
    assert GUESS_PHRASE in prompts.play_instructions["defender"]
    assert "I know the word! It is <word>!" in defender
    start = prompts.play_prompt([], "attacker", "knife", 5)
    assert prompts.play_started in start and "  - " not in start


def test_training_prompt_is_deterministic_and_varied(prompts):
    a = [training_prompt(prompts, HISTORY, "attacker", s) for s in range(40)]
    b = [training_prompt(prompts, HISTORY, "attacker", s) for s in range(40)]
    assert a == b
    assert len(set(a)) > 10
    for text in a:
        assert "Spoons, mostly." in text and "knife" in text and "{" not in text
        assert text.rstrip().endswith(":")
    for s in range(40):
        d = training_prompt(prompts, HISTORY, "defender", s)
        assert "knife" not in d  # the defender is never told the word
        e = training_prompt(prompts, [], "attacker", s)
        assert "knife" in e and "Spoons" not in e


def test_every_rule_text_keeps_the_guess_phrase(prompts):
    assert GUESS_PHRASE in prompts.play_rules
    for rules in prompts.rules:
        assert GUESS_PHRASE in rules and "{max_turns}" in rules


def _write(tmp_path, data) -> Path:
    p = tmp_path / "prompts.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_missing_key_is_named(tmp_path):
    data = yaml.safe_load((REPO / "data" / "prompts.yaml").read_text())
    del data["training"]["separators"]
    with pytest.raises(SpagInputError, match="missing key 'training.separators'"):
        load_prompts(_write(tmp_path, data))


def test_bad_placeholder_is_named(tmp_path):
    data = yaml.safe_load((REPO / "data" / "prompts.yaml").read_text())
    data["play"]["instructions"]["defender"] = "Guess {word}"
    with pytest.raises(SpagInputError, match=r"play.instructions.defender.*\['word'\]"):
        load_prompts(_write(tmp_path, data))
    data = yaml.safe_load((REPO / "data" / "prompts.yaml").read_text())
    data["training"]["instructions"]["defender"][0] = "The word is {target_word}"
    with pytest.raises(SpagInputError, match=r"training.instructions.defender\[0\]"):
        load_prompts(_write(tmp_path, data))
    data = yaml.safe_load((REPO / "data" / "prompts.yaml").read_text())
    data["training"]["layouts"] = ["sideways"]
    with pytest.raises(SpagInputError, match="sideways"):
        load_prompts(_write(tmp_path, data))


def test_missing_file(tmp_path):
    with pytest.raises(SpagInputError, match="not found"):
        load_prompts(tmp_path / "nope.yaml")
