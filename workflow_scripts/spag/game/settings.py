"""The game's settings (config ``game``), declared once for every step that plays,
scores or trains: the number of turns, the prompt texts and how prompts are rendered."""

from __future__ import annotations

from dataclasses import dataclass

from spag.game.base import GAMES
from spag.models.rendering import PROMPT_FORMATS
from spag.settings import opt, section


@section("game")
@dataclass(frozen=True, kw_only=True)
class GameSettings:
    """The game as played in every step (docs/design.md sections 2 and 5)."""

    name: str = opt("taboo", "the game (spag.game.base.GAMES)", choices=tuple(GAMES))
    max_turns: int = opt(5, "turns per player: a game has at most 2 x max_turns messages")
    prompts: str | None = opt(None, "prompts YAML; None: the game's shipped texts")
    prompt_format: str = opt(
        "raw",
        "raw: the prompt text as it is (paper, base models); chat: through the tokenizer's "
        "chat template (instruct models)",
        choices=PROMPT_FORMATS,
    )
