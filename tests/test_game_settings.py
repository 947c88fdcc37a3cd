"""A game's own settings (config ``game.settings``, declared in its module) and its
secrets (any one-line string unless the game narrows it)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
import yaml
from conftest import REPO

from spag.cli import main
from spag.config import validate_config
from spag.data.words import read_word_list
from spag.errors import SpagInputError
from spag.game import base
from spag.game.kuhn_poker import KuhnPoker
from spag.game.taboo import TABOO
from spag.settings import opt


@dataclass(frozen=True, kw_only=True)
class PileSettings:
    piles: tuple[int, ...] = opt((3, 4, 5), "the heaps a game starts from")


class Piles(KuhnPoker):
    """A game whose deals are its settings: one secret, the heaps written ``3-4-5``."""

    name = "piles"
    settings = PileSettings

    @property
    def deals(self) -> tuple[str, ...]:
        return ("-".join(map(str, self.options.piles)),)


PILES = Piles()


@pytest.fixture
def piles_registered(monkeypatch):
    monkeypatch.setitem(base.GAMES, "piles", f"{__name__}:PILES")


def test_a_game_is_dealt_from_its_settings(piles_registered):
    assert base.load_game("piles").deals == ("3-4-5",)
    assert base.load_game("piles", {"piles": (1, 2)}).deals == ("1-2",)
    # As Snakemake's --config hands them over: text, read as the setting's type.
    assert base.load_game("piles", {"piles": ["1", "2"]}).deals == ("1-2",)
    with pytest.raises(SpagInputError, match=r"game.settings.piles: \['1', 'x'\] is not"):
        base.load_game("piles", {"piles": ["1", "x"]})
    with pytest.raises(SpagInputError, match=r"game.settings.piles: \[True\] is not a list of int"):
        base.load_game("piles", {"piles": [True]})
    assert TABOO.with_settings({}) is TABOO  # an empty game.settings: the defaults
    assert PILES.deals == ("3-4-5",)  # the registered game keeps its defaults


def test_a_setting_the_game_does_not_declare_is_refused_by_key(piles_registered):
    with pytest.raises(SpagInputError, match=r"game.settings.heaps: not a setting of piles "):
        base.load_game("piles", {"heaps": (1, 2)})
    with pytest.raises(SpagInputError, match=r"game.settings.piles: .* taboo \(it has none\)"):
        base.load_game("taboo", {"piles": (1, 2)})


def test_the_plan_refuses_a_game_setting_by_its_key():
    cfg = copy.deepcopy(yaml.safe_load((REPO / "config.yaml").read_text()))
    cfg["game"]["settings"] = {"piles": [3, 4]}
    with pytest.raises(SpagInputError, match=r"game.settings.piles: not a setting of taboo"):
        validate_config(cfg)


def test_the_deals_step_takes_the_game_settings(piles_registered, tmp_path, capsys):
    train, test = tmp_path / "train.txt", tmp_path / "test.txt"
    args = ["deals", "--game", "piles", "--output-train", str(train), "--output-test", str(test)]
    assert main([*args, "--game-settings", "piles=2,7"]) == 0
    assert train.read_text() == "2-7\n"
    # Read back under the game's own secret rule: any one-line string.
    assert read_word_list(train, PILES.check_secret) == ["2-7"]
    assert main([*args, "--game-settings", "heaps=1"]) == 2
    assert "--game-settings: 'heaps=1' is not KEY=VALUE with KEY one of piles" in (
        capsys.readouterr().err
    )


def test_secrets_follow_the_game(tmp_path):
    words = tmp_path / "secrets.txt"
    words.write_text("2-7\nJQ\n")
    assert read_word_list(words, PILES.check_secret) == ["2-7", "JQ"]
    # Taboo's secrets are words a-z: its judge builds patterns and plurals from them.
    with pytest.raises(SpagInputError, match=r"secrets.txt:1: word '2-7' is not alphabetic"):
        read_word_list(words, TABOO.check_secret)
    words.write_text("2-7 \n")
    with pytest.raises(SpagInputError, match=r"secrets.txt:1: secret '2-7 ' of piles"):
        read_word_list(words, PILES.check_secret)
