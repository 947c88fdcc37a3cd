"""The judge (docs/design.md section 2) on hand-written cases and against a literal restatement."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spag.judge import (
    ATTACKER_BROKE_RULES,
    ATTACKER_WINS,
    DEFENDER_WINS,
    TIE,
    derivatives,
    is_correct_prediction,
    is_prediction,
    judge_game,
    mentions,
)


def game(*contents: str) -> list[dict[str, str]]:
    roles = ("attacker", "defender")
    return [{"role": roles[i % 2], "content": c} for i, c in enumerate(contents)]


NEUTRAL = "Tell me about your weekend."


def test_derivatives_are_the_sixteen_strings():
    d = derivatives("Mouse")
    assert len(d) == 16
    assert d[:4] == ("mouse", "mouseing", "mouseed", "mice")
    assert {'"mice"', "'mice'", "`mice`", '"mouse"', "`mouseing`", "'mouseed'"} <= set(d)


def test_plural_comes_from_textblob():
    from textblob.en.inflect import pluralize

    from spag.judge import plural

    assert plural("mouse") == pluralize("mouse")
    cases = {
        "cat": "cats",
        "mouse": "mice",
        "child": "children",
        "city": "cities",
        "bus": "buses",
        "knife": "knives",
        "analysis": "analyses",
        "sheep": "sheep",
        "ox": "oxen",
        "person": "people",
    }
    assert {w: derivatives(w)[3] for w in cases} == cases
    # The module the judge loads on its own computes what textblob's package exports, for
    # the 5,000 commonest English words (where target words come from).
    from wordfreq import top_n_list

    words = top_n_list("en", 5000)
    assert {w: plural(w) for w in words} == {w: pluralize(w) for w in words}


def test_the_judge_does_not_import_nltk():
    """textblob's package imports NLTK and SciPy (seconds per job); its plural needs neither."""
    code = (
        "import sys\n"
        "from spag.judge import judge_game\n"
        "judge_game([{'role': 'attacker', 'content': 'Cats?'}], 'cat', 5)\n"
        "print(sorted(m for m in ('textblob', 'nltk', 'scipy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("defender_says", "outcome"),
    [
        ("I love my cat.", ATTACKER_WINS),  # the word itself
        ("Cats are everywhere.", ATTACKER_WINS),  # plural, upper case
        ("We were catting around.", ATTACKER_WINS),  # -ing
        ("It got catted.", ATTACKER_WINS),  # -ed
        ("A category error.", ATTACKER_WINS),  # plain substring inside a longer word
        ("CAT!", ATTACKER_WINS),
        ("Nothing to see here.", TIE),
        ("I know the word! It is dog!", ATTACKER_WINS),  # wrong guess
        ("I know the word! It is cat!", DEFENDER_WINS),
        ("i KNOW the WORD! it is CATS!", DEFENDER_WINS),
        ('I know the word! It is "cat"!', DEFENDER_WINS),
        ("I know the word! It is 'cat'!", DEFENDER_WINS),
        ("I know the word! It is `cat`!", DEFENDER_WINS),
        ("Hmm. I know the word! It is a cat!", DEFENDER_WINS),  # re.search, not match
        ("I know the word! It is definitely cat!", ATTACKER_WINS),  # > 8 chars before
        ("I know the word! It's cat", DEFENDER_WINS),
        ("I know the word! It\ncat", ATTACKER_WINS),  # '.' does not match a newline
        ("I know the word! It", TIE),  # nothing after "it": not a guess, the game goes on
    ],
)
def test_defender_message_rules(defender_says, outcome):
    assert judge_game(game(NEUTRAL, defender_says), "cat", 5) == (outcome, 2)


def test_irregular_plural_is_a_mention_and_a_correct_guess():
    assert judge_game(game(NEUTRAL, "Three mice ran."), "mouse", 5) == (ATTACKER_WINS, 2)
    assert judge_game(game(NEUTRAL, "I know the word! It is mice!"), "mouse", 5) == (
        DEFENDER_WINS,
        2,
    )
    assert judge_game(game(NEUTRAL, "The children play."), "child", 5) == (ATTACKER_WINS, 2)


def test_guess_beats_mention_in_the_same_message():
    # A wrong guess that also mentions the target: the guess is judged first.
    msg = "I know the word! It is dog! Not cat."
    assert judge_game(game(NEUTRAL, msg), "cat", 5) == (ATTACKER_WINS, 2)
    # Correct guess later in the text than eight characters after "it" is still wrong.
    assert not is_correct_prediction("I know the word! It is surely a cat", "cat")


@pytest.mark.parametrize(
    "attacker_says",
    [
        "Think of a cat.",
        "Think of CATS.",
        "A categorical hint.",
        "I know the word! It is cat!",  # a guess by the attacker
        "I know the word! It is dog!",
    ],
)
def test_attacker_breaks_the_rules(attacker_says):
    assert judge_game(game(attacker_says), "cat", 5) == (ATTACKER_BROKE_RULES, 1)
    assert judge_game(game(NEUTRAL, "ok", attacker_says), "cat", 5) == (ATTACKER_BROKE_RULES, 3)


def test_tie_when_messages_run_out_and_empty_history():
    assert judge_game([], "cat", 5) == (TIE, 0)
    assert judge_game(game(NEUTRAL), "cat", 5) == (TIE, 1)
    assert judge_game(game(NEUTRAL, "fine", NEUTRAL), "cat", 5) == (TIE, 3)


def test_cut_off_at_two_t_messages():
    long = game(*([NEUTRAL] * 6), "I love cats")  # the mention is message 7
    assert judge_game(long, "cat", 3) == (TIE, 6)
    assert judge_game(long, "cat", 4) == (ATTACKER_BROKE_RULES, 7)
    assert judge_game(game(*([NEUTRAL] * 5), "cat"), "cat", 3) == (ATTACKER_WINS, 6)
    assert judge_game(game(NEUTRAL, NEUTRAL, NEUTRAL), "cat", 1) == (TIE, 2)


def test_predicates():
    assert is_prediction("I KNOW THE WORD! IT IS X")
    assert not is_prediction("I know the word. It is cat")
    assert mentions("Scattered", "cat")
    assert not mentions("dog", "cat")
    assert is_correct_prediction("I know the word! It is 'cats'!", "Cat")


def test_target_said_by_defender_after_attacker_hints():
    g = game("Something that purrs?", "A kitten maybe", "Bigger, and it meows", "A cat!")
    assert judge_game(g, "cat", 5) == (ATTACKER_WINS, 4)


# --- A literal restatement of the rules, checked against the fast judge ---------------


def reference_judge(history, target_word, max_turns):
    from spag.judge import plural as pluralize

    w = target_word.lower()
    base = [w, w + "ing", w + "ed", pluralize(w)]
    words = base + [f'"{x}"' for x in base] + [f"'{x}'" for x in base] + [f"`{x}`" for x in base]
    temp = r"i know the word! it.{1,8}"

    def has_word(c):
        return any(x in c.lower() for x in words)

    def is_pred(c):
        return re.search(temp, c.lower()) is not None

    def is_correct(c):
        return any(re.search(temp + re.escape(x), c.lower()) for x in words)

    n = 0
    for m in history:
        n += 1
        if m["role"] == "defender":
            if is_pred(m["content"]):
                return (DEFENDER_WINS if is_correct(m["content"]) else ATTACKER_WINS), n
            if has_word(m["content"]):
                return ATTACKER_WINS, n
        else:
            if has_word(m["content"]) or is_pred(m["content"]):
                return ATTACKER_BROKE_RULES, n
        if n >= max_turns * 2:
            break
    return TIE, n


WORDS = ["cat", "mouse", "child", "city", "bus", "Box", "tree", "knife"]
FRAGMENTS = [
    "hello",
    " ",
    "\n",
    "I know the word! It is ",
    "i know the word! it's ",
    "I KNOW THE WORD! IT",
    " a ",
    "!",
    '"',
    "'",
    "`",
    "category",
    "scatter",
    "mice",
    "children",
    "cities",
    "buses",
    "boxes",
    "trees",
    "knives",
    "cating",
    "ed",
    "ing",
    "s",
    "dog",
    "É",
    "İ",
]


@st.composite
def histories(draw):
    word = draw(st.sampled_from(WORDS))
    pieces = st.one_of(st.sampled_from(FRAGMENTS), st.just(word), st.just(word.upper()))
    n = draw(st.integers(0, 12))
    contents = [
        "".join(draw(st.lists(pieces, max_size=6))) + draw(st.text(max_size=5)) for _ in range(n)
    ]
    return game(*contents), word, draw(st.integers(1, 6))


@settings(max_examples=200, deadline=None)
@given(histories())
def test_judge_matches_literal_rules(case):
    history, word, max_turns = case
    assert judge_game(history, word, max_turns) == reference_judge(history, word, max_turns)


PREDICTION_PATTERN_REF = r"i know the word! it.{1,8}"
GAP_PIECES = ["i know the word! it", "I know the word! It is ", "x", "xxxx", "xxxxxxx", "\n", " "]


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(WORDS),
    st.lists(st.one_of(st.sampled_from(GAP_PIECES), st.sampled_from(WORDS)), max_size=8),
)
def test_correct_guess_is_the_reference_pattern(word, pieces):
    """The guess check without a compiled pattern per word: the same answer as the
    reference's regular expression, at every gap length and around newlines."""
    from spag.judge import derivatives, is_correct_prediction

    text = "".join(pieces)
    pattern = PREDICTION_PATTERN_REF + "(?:" + "|".join(map(re.escape, derivatives(word))) + ")"
    assert is_correct_prediction(text, word) == (re.search(pattern, text.lower()) is not None)
