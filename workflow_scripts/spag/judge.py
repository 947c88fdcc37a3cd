"""The Adversarial Taboo judge at its contract path (``spag.judge.judge_game``,
docs/design.md section 2); the game itself is :mod:`spag.game.taboo`."""

from spag.game.taboo import (
    ATTACKER_BROKE_RULES,
    ATTACKER_WINS,
    DEFENDER_WINS,
    PREDICTION_PATTERN,
    QUOTES,
    TIE,
    derivatives,
    is_correct_prediction,
    is_prediction,
    judge_game,
    mentions,
    plural,
)

__all__ = [
    "ATTACKER_BROKE_RULES",
    "ATTACKER_WINS",
    "DEFENDER_WINS",
    "PREDICTION_PATTERN",
    "QUOTES",
    "TIE",
    "derivatives",
    "is_correct_prediction",
    "is_prediction",
    "judge_game",
    "mentions",
    "plural",
]
