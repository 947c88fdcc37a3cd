"""Kuhn Poker solved exactly: a strategy's value, its best responses and exploitability.

One hand: a deck of J < Q < K, each player antes 1 chip and is dealt one card. The
first player checks or bets 1; after a check the second player checks (showdown: the
higher card takes the pot) or bets; facing a bet a player calls (showdown) or folds
(the bettor takes the pot). Zero-sum; at equilibrium the first player wins -1/18 chip
per hand.

A *strategy* gives, at each of the 12 information sets (seat, own card, moves so
far), a probability for each legal move. A model playing both seats is one strategy
over all 12. Everything here is exact enumeration over the 6 deals and the 64 pure
strategies of a seat: no sampling.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from fractions import Fraction

CARDS = ("J", "Q", "K")
SEATS = ("first", "second")
CHECK, BET, CALL, FOLD = "check", "bet", "call", "fold"
# Where a seat acts (moves so far) and its moves there: the passive one, then the
# aggressive one (bet, or call facing a bet).
DECISIONS: dict[str, dict[tuple[str, ...], tuple[str, str]]] = {
    "first": {(): (CHECK, BET), (CHECK, BET): (FOLD, CALL)},
    "second": {(CHECK,): (CHECK, BET), (BET,): (FOLD, CALL)},
}
# (seat, card, moves so far): the 12 information sets.
InfoSet = tuple[str, str, tuple[str, ...]]
INFOSETS: tuple[InfoSet, ...] = tuple(
    (seat, card, history) for seat in SEATS for card in CARDS for history in DECISIONS[seat]
)
# A strategy: information set -> move -> probability (over the legal moves).
Strategy = Mapping[InfoSet, Mapping[str, float]]
DEALS = tuple(itertools.permutations(CARDS, 2))  # (first's card, second's card), 1/6 each


def legal_moves(history: tuple[str, ...]) -> tuple[str, ...]:
    """The moves of whoever acts after ``history`` (empty when the hand is over)."""
    for seat in SEATS:
        if history in DECISIONS[seat]:
            return DECISIONS[seat][history]
    return ()


def to_act(history: tuple[str, ...]) -> str | None:
    """The seat that acts after ``history``, None when the hand is over."""
    return next((seat for seat in SEATS if history in DECISIONS[seat]), None)


def payoff(deal: tuple[str, str], history: tuple[str, ...]) -> int:
    """Chips the first player wins in a finished hand."""
    showdown = 1 if CARDS.index(deal[0]) > CARDS.index(deal[1]) else -1
    if history == (CHECK, CHECK):
        return showdown
    if history[-1] == FOLD:
        # The player who folded loses its ante (a bet it did not call is returned).
        return 1 if to_act(history[:-1]) == "second" else -1
    if history[-1] == CALL:
        return 2 * showdown
    raise ValueError(f"not a finished hand: {history}")


def first_player_value(strategy: Strategy, opponent: Strategy | None = None) -> float:
    """The first player's expected chips per hand: the first seat plays ``strategy``,
    the second ``opponent`` (``strategy`` itself by default, as in self-play)."""
    opponent = strategy if opponent is None else opponent

    def walk(deal: tuple[str, str], history: tuple[str, ...]) -> float:
        seat = to_act(history)
        if seat is None:
            return payoff(deal, history)
        mover = strategy if seat == "first" else opponent
        card = deal[SEATS.index(seat)]
        probs = mover[(seat, card, history)]
        return sum(p * walk(deal, (*history, m)) for m, p in probs.items() if p)

    return sum(walk(deal, ()) for deal in DEALS) / len(DEALS)


def pure_strategies(seat: str) -> list[dict[InfoSet, dict[str, float]]]:
    """Every deterministic strategy of ``seat``: one move at each of its 6 sets (64)."""
    sets = [s for s in INFOSETS if s[0] == seat]
    choices = [legal_moves(s[2]) for s in sets]
    return [
        {
            s: {m: float(m == pick) for m in legal_moves(s[2])}
            for s, pick in zip(sets, picks, strict=True)
        }
        for picks in itertools.product(*choices)
    ]


def best_response_value(strategy: Strategy, seat: str) -> float:
    """What a best response in ``seat`` wins per hand against ``strategy`` in the other
    seat (a best response can always be deterministic: the best of the 64)."""
    if seat == "first":
        return max(first_player_value(br, strategy) for br in pure_strategies("first"))
    return max(-first_player_value(strategy, br) for br in pure_strategies("second"))


def exploitability(strategy: Strategy) -> float:
    """The mean over both seats of what a best response wins against ``strategy``
    (0 at equilibrium: the first seat's best response wins -1/18, the second's +1/18)."""
    return (best_response_value(strategy, "first") + best_response_value(strategy, "second")) / 2


def value_against(strategy: Strategy, opponent: Strategy) -> float:
    """Chips per hand ``strategy`` wins against ``opponent``, both seats averaged."""
    as_first = first_player_value(strategy, opponent)
    as_second = -first_player_value(opponent, strategy)
    return (as_first + as_second) / 2


def uniform_random() -> dict[InfoSet, dict[str, float]]:
    """The player that picks each legal move with equal probability."""
    return {s: {m: 0.5 for m in legal_moves(s[2])} for s in INFOSETS}


def equilibrium(alpha: float | Fraction = Fraction(1, 6)) -> dict[InfoSet, dict[str, float]]:
    """A Nash equilibrium: the first seat's family at ``alpha`` in [0, 1/3] (bluff a J
    with ``alpha``, bet a K with ``3 alpha``, call a bet with a Q with ``alpha + 1/3``),
    the second seat's unique strategy (bet a J after a check with 1/3, call a bet with
    a Q with 1/3, always bet and call with a K, never call with a J or bet with a Q).
    Kuhn's solution; the first seat never bets a Q or calls with a J."""
    if not 0 <= alpha <= Fraction(1, 3):
        raise ValueError(f"alpha must be in [0, 1/3], got {alpha}")
    third = Fraction(1, 3)
    aggressive = {  # probability of bet / call at each set
        ("first", "J", ()): alpha,
        ("first", "Q", ()): 0,
        ("first", "K", ()): 3 * alpha,
        ("first", "J", (CHECK, BET)): 0,
        ("first", "Q", (CHECK, BET)): alpha + third,
        ("first", "K", (CHECK, BET)): 1,
        ("second", "J", (CHECK,)): third,
        ("second", "Q", (CHECK,)): 0,
        ("second", "K", (CHECK,)): 1,
        ("second", "J", (BET,)): 0,
        ("second", "Q", (BET,)): third,
        ("second", "K", (BET,)): 1,
    }
    return {s: _two(s, float(p)) for s, p in aggressive.items()}


def _two(infoset: InfoSet, aggressive: float) -> dict[str, float]:
    passive_move, aggressive_move = legal_moves(infoset[2])
    return {passive_move: 1.0 - aggressive, aggressive_move: aggressive}


def aggressive_probability(strategy: Strategy, infoset: InfoSet) -> float:
    """The probability of bet (or call, facing a bet) at ``infoset``."""
    return strategy[infoset][legal_moves(infoset[2])[1]]
