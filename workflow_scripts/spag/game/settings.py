"""The game's settings (config ``game``), declared once for every step that plays,
scores or trains: the number of turns, the prompt texts and how prompts are rendered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spag.game.base import GAMES
from spag.models.rendering import PROMPT_FORMATS
from spag.settings import Checked, opt


@dataclass(frozen=True, kw_only=True)
class GameSettings(Checked):
    """The game as played in every step (docs/design.md sections 2 and 5)."""

    name: str = opt(
        "taboo",
        "the game played: a name registered in spag/game/base.py GAMES (taboo: "
        "Adversarial Taboo, the paper's)",
        choices=GAMES,
    )
    max_turns: int = opt(5, "turns per player: a game has at most 2 x max_turns messages", ge=1)
    prompts: str | None = opt(
        None,
        "the game's prompts file; null: the one it ships (data/prompts.yaml, "
        "data/kuhn_poker_prompts.yaml)",
    )
    prompt_format: str = opt(
        "raw",
        "raw: the prompt text as it is (the paper, base models); chat: through the "
        "tokenizer's chat template (instruct models) in play, training, scoring and "
        "evaluation",
        choices=PROMPT_FORMATS,
    )
    settings: dict[str, Any] | None = opt(
        None,
        "the chosen game's own settings, declared in its module (Game.settings) with their "
        "defaults; they decide its deals. null: its defaults (Taboo and Kuhn Poker have none)",
    )
