"""What a game is to the pipeline, and the games by name (config ``game.name``).

A game is one module (``spag/game/<name>.py``) with one object implementing
:class:`Game`, and its prompts file; :data:`GAMES` registers it. Everything else
(the self-play loop, episodes, rewards, imitation samples, evaluation tables,
summaries, plots) speaks to this protocol and never to a game's own words.

The shape follows TextArena's environments (a game is dealt, prompts each player,
and judges what is said), kept to what a batched, turn-by-turn loop needs:

- two roles that speak in turn, the first one first; a game has at most
  ``2 * max_turns`` messages;
- a *secret* dealt to each game (Taboo: the target word), stored in the episodes'
  ``target_word`` column and shown only where the game's prompts show it;
- outcome names, each either decisive (a role won by play), a rule break (a role
  broke the rules: the other role wins) or neither (a tie);
- the judge: after each message, whether the game is over, and at the end its
  outcome and the message that decided it;
- where its secrets come from: a word source (``deals`` None: Taboo's target words,
  config ``words``) or a closed set the game lists (``deals``: Kuhn Poker's six deals,
  each played ``selfplay.games_per_secret`` times per epoch);
- optionally a scripted player (``scripted_reply``), legal but naive, whose games
  can be M0's demonstrations (``data.imitation: scripted``).
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from spag.errors import SpagInputError

# Game name -> "module:object" of its implementation.
GAMES: dict[str, str] = {
    "taboo": "spag.game.taboo:TABOO",
    "kuhn_poker": "spag.game.kuhn_poker:KUHN_POKER",
}


class Game(Protocol):
    """The protocol a game implements (see the module notes)."""

    name: str
    roles: tuple[str, str]  # speaking order: roles[0] speaks first
    outcomes: tuple[str, ...]  # every outcome name written to the data, in table order
    prompts_file: str  # the shipped prompts file, relative to the project (game.prompts)
    deals: tuple[str, ...] | None  # a closed set of secrets, or None: from config words
    demonstrations: str  # data.imitation's default: a shipped file, or "scripted"
    # (history, secret, random.Random) -> a reply; None when the game has no scripted player.
    scripted_reply: Callable[[Sequence[Mapping[str, str]], str, random.Random], str] | None

    def winner(self, outcome: str) -> str | None:
        """The role that won ``outcome`` by play; None for ties and rule breaks."""

    def rule_breaker(self, outcome: str) -> str | None:
        """The role that broke the rules in ``outcome``, or None."""

    def result(self, outcome: str, role: str) -> float:
        """``role``'s signed result of ``outcome``: what it won (> 0) or lost (< 0)."""

    def judge(
        self, history: Sequence[Mapping[str, str]], secret: str, max_turns: int
    ) -> tuple[str, int]:
        """``(outcome, n)``: the game's outcome and the message n that decided it."""

    def end_reason(
        self, history: Sequence[Mapping[str, str]], secret: str, max_turns: int
    ) -> str | None:
        """Why the game is over after its last message, or None while it goes on."""

    def load_prompts(self, path: str | None = None) -> Any:
        """The game's prompt texts (its shipped file without ``path``)."""

    def default_prompts_path(self) -> str:
        """The shipped prompts file."""

    def play_prompt(
        self,
        prompts: Any,
        history: Sequence[Mapping[str, str]],
        role: str,
        secret: str,
        max_turns: int,
    ) -> str:
        """The prompt for ``role``'s next message in play (fixed text)."""

    def training_prompt(
        self,
        prompts: Any,
        history: Sequence[Mapping[str, str]],
        role: str,
        secret: str,
        max_turns: int,
        u: float,
    ) -> str:
        """A randomised training prompt for ``role``'s next message; ``u`` in [0, 1)
        picks the variant."""


def load_game(name: str) -> Game:
    """The registered game ``name`` (config ``game.name``)."""
    if name not in GAMES:
        raise SpagInputError(f"game.name: unknown game {name!r} (known: {', '.join(GAMES)})")
    module, obj = GAMES[name].split(":")
    return getattr(importlib.import_module(module), obj)


def other_role(game: Game, role: str) -> str:
    """The role that is not ``role``."""
    first, second = game.roles
    return second if role == first else first
