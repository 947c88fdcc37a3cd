"""Adversarial Taboo (docs/design.md section 2, the research code's rules, exactly).

Two roles, attacker first; only the attacker knows the target word (the game's
secret). The defender may guess once with "I know the word! It is <word>!".

- The *derivatives* of a word ``w`` (lower-cased): ``w``, ``w+"ing"``, ``w+"ed"``
  and textblob's plural, each also in double quotes, single quotes and
  backticks: 16 strings.
- A *prediction*: the lower-cased message matches ``i know the word! it.{1,8}``;
  a *correct* one: that pattern followed by a derivative.
- A *mention*: a derivative occurs anywhere in the lower-cased message (so
  ``cat`` is mentioned by ``category``: the reference's rule, kept).
- Judging walks the messages, n = 1, 2, ...: a defender's prediction wins for the
  defender when correct, else for the attacker; a defender's mention wins for the
  attacker; an attacker's mention or prediction breaks the rules; after message
  n >= 2T the game is a tie; when the messages run out, a tie at their count.

The prompt texts are data (``data/prompts.yaml``, read by :mod:`spag.game.prompts`).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ATTACKER, DEFENDER = "attacker", "defender"
ATTACKER_WINS = "attacker_wins"
DEFENDER_WINS = "defender_wins"
ATTACKER_BROKE_RULES = "attacker_broke_rules"
TIE = "tie"

# The guess phrase as the prompts write it, and as the judge reads it (lower-cased).
GUESS_PHRASE = "I know the word! It is"
PREDICTION_PATTERN = r"i know the word! it.{1,8}"
QUOTES = ('"', "'", "`")
# The research code stops a game at a defender message containing this (any case).
GUESS_MARK = "i know the word"

# Why a game ended (recorded per episode).
END_GUESS = "guess"
END_JUDGED = "judged"
END_MAX_TURNS = "max_turns"


@functools.cache
def _textblob_pluralize() -> Callable[[str], str]:
    """``textblob.en.inflect.pluralize``, its module loaded on its own.

    ``import textblob.en.inflect`` first runs textblob's package, which imports NLTK and
    SciPy's statistics for its blob classes: 3-4 CPU-seconds in every job that judges a
    game. The module itself needs only the standard library (textblob 0.20.1, pinned), so
    it is loaded from its file, once per process and only when a plural is asked for.
    """
    spec = importlib.util.find_spec("textblob")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the judge needs textblob (pip install textblob)")
    path = Path(next(iter(spec.submodule_search_locations))) / "en" / "inflect.py"
    module_spec = importlib.util.spec_from_file_location("spag._textblob_inflect", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.pluralize


def plural(word: str) -> str:
    """English plural as computed by ``textblob.en.inflect.pluralize``."""
    return _textblob_pluralize()(word)


@functools.lru_cache(maxsize=65536)
def derivatives(word: str) -> tuple[str, ...]:
    """The 16 strings that count as the target word: 4 forms, bare and in 3 quote styles."""
    w = word.lower()
    forms = (w, w + "ing", w + "ed", plural(w))
    return forms + tuple(q + f + q for f in forms for q in QUOTES)


@functools.lru_cache(maxsize=4096)
def _correct_prediction_re(word: str) -> re.Pattern[str]:
    return re.compile(
        PREDICTION_PATTERN + "(?:" + "|".join(map(re.escape, derivatives(word))) + ")"
    )


def is_prediction(text: str) -> bool:
    """Whether ``text`` is a guess."""
    return re.search(PREDICTION_PATTERN, text.lower()) is not None


def is_correct_prediction(text: str, word: str) -> bool:
    """Whether ``text`` guesses ``word`` (the guess phrase followed by a derivative)."""
    return _correct_prediction_re(word).search(text.lower()) is not None


def mentions(text: str, word: str) -> bool:
    """Whether a derivative of ``word`` occurs in the lower-cased ``text``."""
    low = text.lower()
    return any(d in low for d in derivatives(word))


def judge_game(
    history: Sequence[Mapping[str, str]], target_word: str, max_turns: int
) -> tuple[str, int]:
    """Judge one game: ``(outcome, n)`` with n the message at which it was decided.

    ``history`` is a list of ``{"role", "content"}`` dicts, attacker first.
    """
    n = 0
    for n, message in enumerate(history, start=1):
        text = message["content"]
        if message["role"] == DEFENDER:
            if is_prediction(text):
                won = is_correct_prediction(text, target_word)
                return (DEFENDER_WINS if won else ATTACKER_WINS), n
            if mentions(text, target_word):
                return ATTACKER_WINS, n
        elif mentions(text, target_word) or is_prediction(text):
            return ATTACKER_BROKE_RULES, n
        if n >= 2 * max_turns:
            return TIE, n
    return TIE, n


class AdversarialTaboo:
    """Adversarial Taboo through the :class:`spag.game.base.Game` protocol."""

    name = "taboo"
    roles = (ATTACKER, DEFENDER)
    outcomes = (ATTACKER_WINS, DEFENDER_WINS, ATTACKER_BROKE_RULES, TIE)
    prompts_file = "data/prompts.yaml"
    demonstrations = "data/demo_games.json"  # the shipped demonstration games
    deals = None  # target words come from the word source (config words)
    scripted_reply = None
    _winners = {ATTACKER_WINS: ATTACKER, DEFENDER_WINS: DEFENDER}

    def winner(self, outcome: str) -> str | None:
        return self._winners.get(outcome)

    def guess_text(self, word: str) -> str:
        """The defender's correct guess of ``word`` (graded hints score it)."""
        return f"{GUESS_PHRASE} {word}!"

    def rule_breaker(self, outcome: str) -> str | None:
        return ATTACKER if outcome == ATTACKER_BROKE_RULES else None

    def result(self, outcome: str, role: str) -> float:
        """+1 for the winner, -1 for the loser (a rule break loses), 0 in a tie."""
        if outcome == TIE:
            return 0.0
        winner = self._winners.get(outcome, DEFENDER)  # a rule break: the defender wins
        return 1.0 if role == winner else -1.0

    def judge(
        self, history: Sequence[Mapping[str, str]], secret: str, max_turns: int
    ) -> tuple[str, int]:
        return judge_game(history, secret, max_turns)

    def end_reason(
        self, history: Sequence[Mapping[str, str]], secret: str, max_turns: int
    ) -> str | None:
        last = history[-1]
        if last["role"] == DEFENDER and GUESS_MARK in last["content"].lower():
            return END_GUESS
        if judge_game(history, secret, max_turns)[0] != TIE:
            return END_JUDGED
        if len(history) >= 2 * max_turns:
            return END_MAX_TURNS
        return None

    def default_prompts_path(self) -> str:
        from spag.game.prompts import default_prompts_path

        return str(default_prompts_path())

    def load_prompts(self, path: str | None = None) -> Any:
        from spag.game.prompts import load_prompts

        return load_prompts(path)

    def play_prompt(
        self,
        prompts: Any,
        history: Sequence[Mapping[str, str]],
        role: str,
        secret: str,
        max_turns: int,
    ) -> str:
        return prompts.play_prompt(history, role, secret, max_turns)

    def training_prompt(
        self,
        prompts: Any,
        history: Sequence[Mapping[str, str]],
        role: str,
        secret: str,
        max_turns: int,
        u: float,
    ) -> str:
        return prompts.training_prompt_from(
            [m["role"] for m in history],
            [m["content"] for m in history],
            role,
            secret,
            max_turns,
            u,
        )


TABOO = AdversarialTaboo()
