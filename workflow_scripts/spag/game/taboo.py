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

The prompts (docs/design.md section 5): their texts are data (``data/prompts.yaml``,
config ``game.prompts``), rendered here: the fixed play prompt, and the randomised
training prompts (each combination of separator, speaker labels, layout, rule text,
instruction and titles equally likely).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spag.data.words import check_word
from spag.errors import SpagInputError
from spag.game.base import History, PromptsFile, TwoPlayerGame

ATTACKER, DEFENDER = "attacker", "defender"
ROLES = (ATTACKER, DEFENDER)
OTHER_ROLE = {ATTACKER: DEFENDER, DEFENDER: ATTACKER}
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


def judge_game(history: History, target_word: str, max_turns: int) -> tuple[str, int]:
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


# ---------------------------------------------------------------- prompts
LAYOUTS = ("rules_then_history", "history_then_rules", "plain")
_MAX_TURNS = frozenset({"max_turns"})
# Only the attacker may be shown the target word.
_ALLOWED = {ATTACKER: frozenset({"target_word"}), DEFENDER: frozenset()}


@dataclass(frozen=True)
class Prompts:
    """The prompt texts of one prompts file, ready to render."""

    path: str
    play_rules: str
    play_history_title: str
    play_started: str
    play_instructions: Mapping[str, str]
    play_cue: str
    rules: Sequence[str]
    instructions: Mapping[str, Sequence[str]]
    started: Sequence[str]
    history_titles: Sequence[str]
    section_titles: Sequence[str]
    separators: Sequence[str]
    # role -> list of (label of that role, label of the other role)
    speaker_labels: Mapping[str, Sequence[tuple[str, str]]]
    layouts: Sequence[str]
    _rules_cache: dict[tuple[int, int], str] = field(
        default_factory=dict, repr=False, compare=False
    )
    _combinations: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def play_prompt(self, history: History, role: str, target_word: str, max_turns: int) -> str:
        """The fixed prompt for ``role``'s next message; it ends with a cue line."""
        _check_role(role)
        parts = [self.play_rules.format(max_turns=max_turns), "\n\n"]
        if history:
            parts.append(self.play_history_title)
            for m in history:
                parts.append(f"\n  - {m['role']}: {m['content']}")
        else:
            parts.append(self.play_started)
        parts.append("\n\n")
        parts.append(self.play_instructions[role].format(target_word=target_word))
        parts.append("\n\n")
        parts.append(self.play_cue)
        return "".join(parts)

    def training_prompt_from(
        self,
        roles: Sequence[str],
        contents: Sequence[str],
        role: str,
        target_word: str,
        max_turns: int,
        u: float,
    ) -> str:
        """Build a training prompt from parallel role/content lists.

        ``u`` in [0, 1) selects one combination of all the randomised pieces
        (separator, speaker labels, layout, rule text, instruction, titles),
        each combination equally likely.
        """
        _check_role(role)
        idx = int(u * self._n_combinations(role))
        idx, i_sep = divmod(idx, len(self.separators))
        idx, i_lab = divmod(idx, len(self.speaker_labels[role]))
        idx, i_lay = divmod(idx, len(self.layouts))
        idx, i_rul = divmod(idx, len(self.rules))
        idx, i_ins = divmod(idx, len(self.instructions[role]))
        idx, i_tit = divmod(idx, len(self.section_titles))
        idx, i_sta = divmod(idx, len(self.started))
        i_his = idx % len(self.history_titles)

        sep = self.separators[i_sep]
        mine, theirs = self.speaker_labels[role][i_lab]
        layout = self.layouts[i_lay]
        key = (i_rul, max_turns)
        rules = self._rules_cache.get(key)
        if rules is None:
            rules = self._rules_cache[key] = self.rules[i_rul].format(max_turns=max_turns)
        instruction = self.instructions[role][i_ins].format(target_word=target_word)
        label = {role: f"{sep}{mine}: ", OTHER_ROLE[role]: f"{sep}{theirs}: "}
        history = "".join([label[r] + c for r, c in zip(roles, contents, strict=True)])
        cue = f"{sep}{mine}:"
        if not history:
            instruction = f"{instruction} {self.started[i_sta]}"
        if layout == "rules_then_history":
            text = f"{sep}{self.section_titles[i_tit]}: {rules}\n\n{instruction}{history}{cue}"
        elif layout == "history_then_rules":
            text = f"{history}{sep}{self.section_titles[i_tit]}: {rules}\n\n{instruction}{cue}"
        elif history:
            text = f"{rules}\n\n{self.history_titles[i_his]}{history}\n\n{instruction}{cue}"
        else:
            text = f"{rules}\n\n{instruction}{cue}"
        return text.lstrip("\n")

    def _n_combinations(self, role: str) -> int:
        n = self._combinations.get(role)
        if n is None:
            n = (
                len(self.separators)
                * len(self.speaker_labels[role])
                * len(self.layouts)
                * len(self.rules)
                * len(self.instructions[role])
                * len(self.section_titles)
                * len(self.started)
                * len(self.history_titles)
            )
            self._combinations[role] = n
        return n


def _check_role(role: str) -> None:
    if role not in OTHER_ROLE:
        raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")


def read_prompts(c: PromptsFile) -> Prompts:
    """Check the texts of a Taboo prompts file, naming the file and key on error."""
    p = c.path

    labels: dict[str, list[tuple[str, str]]] = {r: [] for r in ROLES}
    raw_labels = c.get("training.speaker_labels")
    if not isinstance(raw_labels, list) or not raw_labels:
        raise SpagInputError(f"{p}: key 'training.speaker_labels' must be a non-empty list")
    for i, pair in enumerate(raw_labels):
        key = f"training.speaker_labels[{i}]"
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(x, str) for x in pair)
        ):
            raise SpagInputError(f"{p}: key '{key}' must be a pair [next speaker, other speaker]")
        for r in ROLES:
            names = {"role": r, "other": OTHER_ROLE[r]}
            try:
                labels[r].append((pair[0].format(**names), pair[1].format(**names)))
            except (KeyError, ValueError, IndexError) as exc:
                raise SpagInputError(
                    f"{p}: key '{key}': only {{role}} and {{other}} may be used ({exc})"
                ) from exc

    layouts = c.texts("training.layouts")
    unknown = [x for x in layouts if x not in LAYOUTS]
    if unknown:
        raise SpagInputError(
            f"{p}: key 'training.layouts' has unknown layout(s) {unknown}; known: {list(LAYOUTS)}"
        )

    return Prompts(
        path=str(p),
        play_rules=c.text("play.rules", _MAX_TURNS),
        play_history_title=c.text("play.history_title"),
        play_started=c.text("play.started"),
        play_instructions={r: c.text(f"play.instructions.{r}", _ALLOWED[r]) for r in ROLES},
        play_cue=c.text("play.cue"),
        rules=tuple(c.texts("training.rules", _MAX_TURNS)),
        instructions={r: tuple(c.texts(f"training.instructions.{r}", _ALLOWED[r])) for r in ROLES},
        started=tuple(c.texts("training.started")),
        history_titles=tuple(c.texts("training.history_titles")),
        section_titles=tuple(c.texts("training.section_titles")),
        separators=tuple(c.texts("training.separators")),
        speaker_labels={r: tuple(v) for r, v in labels.items()},
        layouts=tuple(layouts),
    )


# ---------------------------------------------------------------- the game
class AdversarialTaboo(TwoPlayerGame):
    """Adversarial Taboo through the :class:`spag.game.base.Game` protocol."""

    name = "taboo"
    roles = (ATTACKER, DEFENDER)
    outcomes = (ATTACKER_WINS, DEFENDER_WINS, ATTACKER_BROKE_RULES, TIE)
    prompts_file = "data/prompts.yaml"
    demonstrations = "data/demo_games.json"  # the shipped demonstration games
    deals = None  # target words come from the word source (config words)
    # Words a-z only: the judge builds patterns and plurals from them.
    check_secret = staticmethod(check_word)
    # +1 for the winner, -1 for the loser; a rule break loses; 0 in a tie.
    won = {ATTACKER_WINS: (ATTACKER, 1.0), DEFENDER_WINS: (DEFENDER, 1.0)}
    broken = {ATTACKER_BROKE_RULES: ATTACKER}

    def guess_text(self, word: str) -> str:
        """The defender's correct guess of ``word`` (graded hints score it)."""
        return f"{GUESS_PHRASE} {word}!"

    def judge(self, history: History, secret: str, max_turns: int) -> tuple[str, int]:
        return judge_game(history, secret, max_turns)

    def end_reason(self, history: History, secret: str, max_turns: int) -> str | None:
        last = history[-1]
        if last["role"] == DEFENDER and GUESS_MARK in last["content"].lower():
            return END_GUESS
        if judge_game(history, secret, max_turns)[0] != TIE:
            return END_JUDGED
        if len(history) >= 2 * max_turns:
            return END_MAX_TURNS
        return None

    def read_prompts(self, texts: PromptsFile) -> Prompts:
        return read_prompts(texts)

    def play_prompt(
        self, prompts: Prompts, history: History, role: str, secret: str, max_turns: int
    ) -> str:
        return prompts.play_prompt(history, role, secret, max_turns)

    def training_prompt(
        self, prompts: Prompts, history: History, role: str, secret: str, max_turns: int, u: float
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
