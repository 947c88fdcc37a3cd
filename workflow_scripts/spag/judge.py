"""The Adversarial Taboo judge (docs/design.md section 2, reference semantics).

The rules are reproduced exactly, including their quirks: a target is
"mentioned" by any message containing one of its derivatives as a plain
substring (``cat`` is mentioned by ``category``), and a guess is any message
containing ``i know the word! it`` followed by one to eight characters.

Everything that depends on the target word is computed once per word and
cached, because a run judges hundreds of thousands of messages.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

ATTACKER_WINS = "attacker_wins"
DEFENDER_WINS = "defender_wins"
ATTACKER_BROKE_RULES = "attacker_broke_rules"
TIE = "tie"

# The guess phrase, lower-cased, as the judge reads it.
PREDICTION_PATTERN = r"i know the word! it.{1,8}"
GUESS_PREFIX = "i know the word! it"
_PREDICTION_RE = re.compile(PREDICTION_PATTERN)
QUOTES = ('"', "'", "`")


def _load_pluralize() -> Callable[[str], str]:
    """Return ``textblob.en.inflect.pluralize``.

    Importing ``textblob`` runs its package ``__init__``, which pulls in NLTK and
    costs over a second; the inflect module itself needs only the standard
    library, so it is loaded straight from its file when textblob is not
    imported yet. The function is the same code either way.
    """
    loaded = sys.modules.get("textblob.en.inflect")
    if loaded is not None:
        return loaded.pluralize
    try:
        spec = importlib.util.find_spec("textblob")
        locations = spec.submodule_search_locations if spec else None
        if locations:
            path = f"{list(locations)[0]}/en/inflect.py"
            mod_spec = importlib.util.spec_from_file_location("_spag_textblob_inflect", path)
            if mod_spec is not None and mod_spec.loader is not None:
                module = importlib.util.module_from_spec(mod_spec)
                mod_spec.loader.exec_module(module)
                return module.pluralize
    except (ImportError, OSError, AttributeError):
        pass
    from textblob.en.inflect import pluralize

    return pluralize


def _literal_filter(pattern: str) -> tuple[str, Any] | None:
    """A necessary condition for ``re.search(pattern, word)`` that costs a string test:
    ("exact", words) for ``^w1$|^w2$``, ("suffix", tail) for ``...tail$``; None when
    the pattern is not of these forms (then only the regex decides)."""
    depth, top_level_bar = 0, False
    for ch in pattern:
        depth += ch == "("
        depth -= ch == ")"
        top_level_bar |= ch == "|" and depth == 0
    if top_level_bar:
        alts = pattern.split("|")
        if all(re.fullmatch(r"\^[A-Za-z]+\$", a) for a in alts):
            return "exact", frozenset(a[1:-1] for a in alts)
        return None
    if not pattern.endswith("$") or "\\" in pattern:
        return None
    tail = re.search(r"[A-Za-z]*$", pattern[:-1]).group(0)
    if pattern == f"^{tail}$":
        return "exact", frozenset((tail,))
    return ("suffix", tail) if tail else None


def _fast_pluralize(pluralize: Callable[[str], str]) -> Callable[[str], str]:
    """``pluralize`` (textblob's, classical nouns) with its rules tried only where a cheap
    string test allows a match: the same rules in the same order, the same result
    (tested against textblob on 320,000 English words). Genitives, compounds and words
    with a line end (where ``$`` also matches) go to textblob's own function."""
    g = pluralize.__globals__
    rules = []
    for ruleset in g["plural_rules"]:
        for suffix, inflection, category, _classic in ruleset:  # classical: all apply
            members = frozenset(g["plural_categories"][category]) if category else None
            rules.append((suffix, inflection, members, _literal_filter(suffix.pattern)))
    # Candidate rules by the word's last letter, in rule order.
    by_last: dict[str, list] = {}
    for ch in map(chr, range(32, 127)):
        by_last[ch] = [
            r
            for r in rules
            if r[3] is None
            or (r[3][0] == "suffix" and r[3][1][-1] == ch)
            or (r[3][0] == "exact" and any(w.endswith(ch) for w in r[3][1]))
        ]

    def plural(word: str) -> str:
        if not word or "'" in word or "-" in word or " " in word or "\n" in word:
            return pluralize(word)
        candidates = by_last.get(word[-1])
        if candidates is None:
            return pluralize(word)
        for suffix, inflection, members, test in candidates:
            if members is not None and word not in members:
                continue
            if test is not None:
                kind, value = test
                if (kind == "exact" and word not in value) or (
                    kind == "suffix" and not word.endswith(value)
                ):
                    continue
            if suffix.search(word) is not None:
                return suffix.sub(inflection, word)
        return word

    return plural


@functools.cache
def _pluralize() -> Callable[[str], str]:
    return _fast_pluralize(_load_pluralize())


def plural(word: str) -> str:
    """English plural as computed by ``textblob.en.inflect.pluralize``."""
    return _pluralize()(word)


@functools.lru_cache(maxsize=65536)
def derivatives(word: str) -> tuple[str, ...]:
    """The 16 strings that count as the target word: 4 forms, bare and in 3 quote styles."""
    w = word.lower()
    forms = (w, w + "ing", w + "ed", plural(w))
    return forms + tuple(q + f + q for f in forms for q in QUOTES)


_GAP = (1, 8)  # the ".{1,8}" between the guess phrase and the word


class _WordRules:
    """What the judge needs of one target word.

    Mentions: every quoted form contains its bare form, and "-ing"/"-ed" contain
    the word itself, so testing the word and its plural is the same test. The 16
    forms are built only for a game that ends in a guess (few of them).
    """

    __slots__ = ("_forms", "plural", "word")

    def __init__(self, word: str, plural_form: str) -> None:
        self.word = word
        self.plural = plural_form
        self._forms: tuple[str, ...] | None = None

    def correct(self, low: str) -> bool:
        """``re.search(PREDICTION_PATTERN + "(?:" + "|".join(forms) + ")", low)``, without
        compiling a pattern per target word (a run has tens of thousands of words).

        The pattern matches exactly when, after some occurrence of the guess phrase,
        1 to 8 characters other than a newline (what ``.`` matches) are followed by
        one of the forms.
        """
        forms = self._forms
        if forms is None:
            forms = self._forms = derivatives(self.word)
        start = low.find(GUESS_PREFIX)
        while start >= 0:
            gap = start + len(GUESS_PREFIX)
            for k in range(_GAP[0], _GAP[1] + 1):
                if gap + k > len(low) or low[gap + k - 1] == "\n":
                    break
                if low.startswith(forms, gap + k):
                    return True
            start = low.find(GUESS_PREFIX, start + 1)
        return False


@functools.lru_cache(maxsize=65536)
def _rules(word: str) -> _WordRules:
    w = word.lower()
    return _WordRules(w, plural(w))


def is_prediction(text: str) -> bool:
    """Whether ``text`` is a guess (``re.search`` on the lower-cased text)."""
    low = text.lower()
    return GUESS_PREFIX in low and _PREDICTION_RE.search(low) is not None


def is_correct_prediction(text: str, word: str) -> bool:
    """Whether ``text`` guesses ``word`` (the guess phrase followed by a derivative)."""
    low = text.lower()
    return GUESS_PREFIX in low and _rules(word).correct(low)


def mentions(text: str, word: str) -> bool:
    """Whether a derivative of ``word`` occurs in the lower-cased ``text``."""
    rules = _rules(word)
    low = text.lower()
    return rules.word in low or rules.plural in low


def judge_messages(
    roles: Sequence[str], contents: Sequence[str], target_word: str, max_turns: int
) -> tuple[str, int]:
    """:func:`judge_game` on parallel role and content sequences (the fast path)."""
    rules = _rules(target_word)
    w, pl, correct = rules.word, rules.plural, rules.correct
    search_guess = _PREDICTION_RE.search
    limit = 2 * max_turns
    n = 0
    for role, content in zip(roles, contents, strict=True):
        n += 1
        low = content.lower()
        guess = GUESS_PREFIX in low and search_guess(low) is not None
        if role == "defender":
            if guess:
                return (DEFENDER_WINS if correct(low) else ATTACKER_WINS), n
            if w in low or pl in low:
                return ATTACKER_WINS, n
        elif guess or w in low or pl in low:
            return ATTACKER_BROKE_RULES, n
        if n >= limit:
            return TIE, n
    return TIE, n


def judge_game(
    history: Sequence[Mapping[str, str]], target_word: str, max_turns: int
) -> tuple[str, int]:
    """Judge one game: ``(outcome, n)`` with n the message at which it was decided.

    ``history`` is a list of ``{"role", "content"}`` dicts, attacker first.
    """
    return judge_messages(
        [m["role"] for m in history], [m["content"] for m in history], target_word, max_turns
    )


def judge_flat(
    roles: Sequence[str],
    contents: Sequence[str],
    offsets: Sequence[int],
    target_words: Sequence[str],
    max_turns: Sequence[int],
) -> tuple[list[str], list[int]]:
    """Judge many games whose messages are stored flat.

    Game ``i`` has the messages ``offsets[i]:offsets[i + 1]`` of ``roles`` and
    ``contents``. Returns the outcomes and the n of each game; the result is
    :func:`judge_game` applied game by game, without building per-game lists.
    """
    outcomes: list[str] = []
    ns: list[int] = []
    search_guess = _PREDICTION_RE.search
    for i, word in enumerate(target_words):
        start = offsets[i]
        end = offsets[i + 1]
        limit = 2 * max_turns[i]
        rules = _rules(word)
        w, pl, correct = rules.word, rules.plural, rules.correct
        outcome = TIE
        n = 0
        for k in range(start, end):
            n += 1
            low = contents[k].lower()
            guess = GUESS_PREFIX in low and search_guess(low) is not None
            if roles[k] == "defender":
                if guess:
                    outcome = DEFENDER_WINS if correct(low) else ATTACKER_WINS
                    break
                if w in low or pl in low:
                    outcome = ATTACKER_WINS
                    break
            elif guess or w in low or pl in low:
                outcome = ATTACKER_BROKE_RULES
                break
            if n >= limit:
                break
        outcomes.append(outcome)
        ns.append(n)
    return outcomes, ns
