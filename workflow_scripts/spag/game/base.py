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
  each played ``selfplay.games_per_secret`` times per epoch); a secret is any one-line
  string unless the game narrows it (``check_secret``: Taboo's are words a-z, since its
  judge builds patterns and plurals from them);
- optionally its own settings (``settings``: a dataclass in the game's module, its
  fields the config's ``game.settings`` keys with their defaults): they decide the
  game's deals (:meth:`TwoPlayerGame.with_settings`), so that the secret a game is
  dealt carries everything its rules need after that (a rerun shard, a judge, a reward
  scheme reads the game from its secret alone);
- optionally a scripted player (``scripted_reply``), legal but naive, whose games
  can be M0's demonstrations (``data.imitation: scripted``);
- optionally a closed set of moves (``move_set``: Kuhn Poker's check, bet, call, fold;
  None for Taboo's free text): then ``legal_moves`` after a history, ``read_move`` of a
  reply and ``move_forms`` (the whole replies that name the move: the readers put the
  end of the turn after each) let the samples carry their move and the objective
  ``legal_po`` learn over the legal moves;
- optionally, for a solved game, its information sets (``infosets``: Kuhn Poker's
  twelve), where each model's strategy is read out exactly (``spag read-strategy``);
- optionally a guess (``guess_text``: Taboo's ``I know the word! It is <w>!``), the
  reply that names a secret, by which a fixed listener grades the hints.

An optional ability a game lacks is None (:class:`TwoPlayerGame`'s default): the
workflow asks ``game.infosets is not None``, never whether the attribute exists.

:class:`TwoPlayerGame` gives the common parts (prompts loaded from the game's file
through :class:`PromptsFile`, winners and rule breakers by outcome, signed results),
so that a game module writes only its rules, judge and prompt rendering. Adding a game:
its module, its prompts file under ``data/``, and its line in :data:`GAMES`.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import random
import re
import string
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

from spag.errors import SpagInputError

# The project's root: a game's shipped prompts file is a path relative to it.
PROJECT_DIR = Path(__file__).resolve().parents[3]

# A secret as a word list holds it: one line, no white space around it.
ONE_LINE = re.compile(r"[^\s](?:[^\n\r]*[^\s])?")

# A game's messages so far, in order: each {"role": ..., "content": ...}.
History = Sequence[Mapping[str, str]]

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
    # The dataclass of the game's own settings (config game.settings), or None: it has none.
    settings: type | None
    demonstrations: str  # data.imitation's default: a shipped file, or "scripted"
    # (history, secret, random.Random) -> a reply; None when the game has no scripted player.
    scripted_reply: Callable[[History, str, random.Random], str] | None
    # Every move a reply can name, or None: replies are free text (no legal_moves,
    # read_move, move_forms).
    move_set: tuple[str, ...] | None
    # A solved game's information sets (spag.evaluation.strategy), or None.
    infosets: tuple[Any, ...] | None
    # word -> the reply that guesses it (graded hints), or None: the game has no guess.
    guess_text: Callable[[str], str] | None

    def with_settings(self, values: Mapping[str, Any]) -> Game:
        """The game under its settings ``values`` (config ``game.settings``)."""

    def check_secret(self, secret: str, where: str) -> str:
        """``secret`` if the game can play it, else a :class:`SpagInputError` naming
        ``where`` (a word list's ``file:line``)."""

    def winner(self, outcome: str) -> str | None:
        """The role that won ``outcome`` by play; None for ties and rule breaks."""

    def rule_breaker(self, outcome: str) -> str | None:
        """The role that broke the rules in ``outcome``, or None."""

    def result(self, outcome: str, role: str) -> float:
        """``role``'s signed result of ``outcome``: what it won (> 0) or lost (< 0)."""

    def judge(self, history: History, secret: str, max_turns: int) -> tuple[str, int]:
        """``(outcome, n)``: the game's outcome and the message n that decided it."""

    def end_reason(self, history: History, secret: str, max_turns: int) -> str | None:
        """Why the game is over after its last message, or None while it goes on."""

    def legal_moves(self, history: History) -> tuple[str, ...]:
        """With a ``move_set``: the moves legal for the next message after ``history``."""

    def read_move(self, text: str) -> str | None:
        """With a ``move_set``: the move a reply names, or None."""

    def move_forms(self, move: str) -> tuple[str, ...]:
        """With a ``move_set``: the whole replies that name ``move`` (each read with the
        end of the turn after it, so that a reply running on after the word is not one)."""

    def load_prompts(self, path: str | None = None) -> Any:
        """The game's prompt texts (its shipped file without ``path``)."""

    def default_prompts_path(self) -> str:
        """The shipped prompts file."""

    def play_prompt(
        self, prompts: Any, history: History, role: str, secret: str, max_turns: int
    ) -> str:
        """The prompt for ``role``'s next message in play (fixed text)."""

    def training_prompt(
        self, prompts: Any, history: History, role: str, secret: str, max_turns: int, u: float
    ) -> str:
        """A randomised training prompt for ``role``'s next message; ``u`` in [0, 1)
        picks the variant."""


def load_game(name: str, settings: Mapping[str, Any] | None = None) -> Game:
    """The registered game ``name`` (config ``game.name``) under its ``settings`` (config
    ``game.settings``; None or empty: its defaults)."""
    if name not in GAMES:
        raise SpagInputError(f"game.name: unknown game {name!r} (known: {', '.join(GAMES)})")
    module, obj = GAMES[name].split(":")
    game = getattr(importlib.import_module(module), obj)
    return game.with_settings(settings) if settings else game


def other_role(game: Game, role: str) -> str:
    """The role that is not ``role``."""
    first, second = game.roles
    return second if role == first else first


def placeholders(text: str) -> set[str]:
    """The ``{name}`` fields a prompt text uses."""
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


class PromptsFile:
    """A game's prompts file: typed values read out of its YAML, naming the file and
    key on error (every game's prompts loader reads through it)."""

    def __init__(self, path: str, data: Any) -> None:
        self.path = path
        self.data = data

    @classmethod
    def read(cls, path: str | os.PathLike) -> PromptsFile:
        """Read ``path``; a missing or unreadable file is a :class:`SpagInputError`."""
        import yaml

        p = Path(path)
        if not p.is_file():
            raise SpagInputError(f"prompts file not found: {p}")
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            data = yaml.load(p.read_text(encoding="utf-8"), Loader=loader)
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise SpagInputError(f"{p}: not a readable YAML file: {exc}") from exc
        return cls(str(p), data)

    def get(self, key: str) -> Any:
        node = self.data
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                raise SpagInputError(f"{self.path}: missing key '{key}'")
            node = node[part]
        return node

    def text(self, key: str, allowed: frozenset[str] = frozenset(), value: Any = None) -> str:
        value = self.get(key) if value is None else value
        if not isinstance(value, str):
            raise SpagInputError(f"{self.path}: key '{key}' must be a string")
        try:
            extra = placeholders(value) - allowed
        except ValueError as exc:
            raise SpagInputError(f"{self.path}: key '{key}': bad placeholder: {exc}") from exc
        if extra:
            raise SpagInputError(
                f"{self.path}: key '{key}' uses unknown placeholder(s) {sorted(extra)}; "
                f"allowed: {sorted(allowed) or 'none'}"
            )
        return value

    def texts(self, key: str, allowed: frozenset[str] = frozenset()) -> list[str]:
        values = self.get(key)
        if not isinstance(values, list) or not values:
            raise SpagInputError(f"{self.path}: key '{key}' must be a non-empty list of strings")
        return [self.text(f"{key}[{i}]", allowed, v) for i, v in enumerate(values)]


class TwoPlayerGame:
    """The common parts of a :class:`Game`; a game sets the class attributes and writes
    its judge, ``end_reason``, ``read_prompts`` and the two prompt renderings.

    Outcomes: ``won`` maps each outcome won by play to ``(winner, stake)``, ``broken`` each
    rule break to the role that broke the rules; every other outcome is a tie. A rule
    break costs its breaker ``rule_break_cost`` and gives it to the other role.
    """

    name: ClassVar[str]
    roles: ClassVar[tuple[str, str]]
    outcomes: ClassVar[tuple[str, ...]]
    prompts_file: ClassVar[str]
    deals: ClassVar[tuple[str, ...] | None] = None
    settings: ClassVar[type | None] = None
    demonstrations: ClassVar[str]
    scripted_reply: ClassVar[Callable[..., str] | None] = None
    move_set: ClassVar[tuple[str, ...] | None] = None
    infosets: ClassVar[tuple[Any, ...] | None] = None
    guess_text: ClassVar[Callable[[str], str] | None] = None
    won: ClassVar[Mapping[str, tuple[str, float]]]
    broken: ClassVar[Mapping[str, str]]
    rule_break_cost: ClassVar[float] = 1.0

    def __init__(self, options: Any = None) -> None:
        # The game's settings (an instance of ``settings``), its defaults unless given.
        self.options = options if options is not None or self.settings is None else self.settings()

    def with_settings(self, values: Mapping[str, Any]) -> TwoPlayerGame:
        """This game with the settings ``values`` (each a field of ``settings``)."""
        if not values:
            return self
        declared = [f.name for f in dataclasses.fields(self.settings)] if self.settings else []
        for key in values:
            if key not in declared:
                known = f"its settings: {', '.join(declared)}" if declared else "it has none"
                raise SpagInputError(f"game.settings.{key}: not a setting of {self.name} ({known})")
        from spag.settings import typed_values

        typed = typed_values(self.settings, dict(values), "game.settings")
        try:
            return type(self)(dataclasses.replace(self.options, **typed))
        except (TypeError, ValueError, SpagInputError) as exc:
            raise SpagInputError(f"game.settings of {self.name}: {exc}") from None

    def check_secret(self, secret: str, where: str) -> str:
        """Any one-line string without white space around it (a line of a word list)."""
        if not ONE_LINE.fullmatch(secret):
            raise SpagInputError(
                f"{where}: secret {secret!r} of {self.name} is not one line without white "
                "space around it"
            )
        return secret

    def winner(self, outcome: str) -> str | None:
        won = self.won.get(outcome)
        return won[0] if won else None

    def rule_breaker(self, outcome: str) -> str | None:
        return self.broken.get(outcome)

    def result(self, outcome: str, role: str) -> float:
        """What ``role`` won (> 0) or lost (< 0) in ``outcome``: the stake of a game won
        by play, the rule-break cost of a rule break, 0 in a tie."""
        if outcome in self.won:
            winner, stake = self.won[outcome]
            return float(stake if role == winner else -stake)
        breaker = self.broken.get(outcome)
        if breaker is None:
            return 0.0
        return -self.rule_break_cost if role == breaker else self.rule_break_cost

    def default_prompts_path(self) -> str:
        """The shipped prompts file (``prompts_file`` under the project's folder)."""
        return str(PROJECT_DIR / self.prompts_file)

    def load_prompts(self, path: str | os.PathLike | None = None) -> Any:
        """The game's prompt texts, read and checked (its shipped file without ``path``)."""
        return self.read_prompts(PromptsFile.read(path or self.default_prompts_path()))

    def read_prompts(self, texts: PromptsFile) -> Any:
        """The game's prompt texts out of its prompts file."""
        raise NotImplementedError
