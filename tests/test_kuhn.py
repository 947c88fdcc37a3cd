"""Kuhn Poker solved exactly (spag.game.kuhn_poker), checked against known values and
an independent best response computed information set by information set."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from spag.game.kuhn_poker import (
    CARDS,
    DEALS,
    INFOSETS,
    aggressive_probability,
    best_response_value,
    equilibrium,
    exploitability,
    first_player_value,
    legal_moves,
    payoff,
    to_act,
    uniform_random,
    value_against,
)


def always(aggressive: bool):
    """Bet and call everywhere (or check and fold everywhere)."""
    return {
        s: {m: float((m in ("bet", "call")) == aggressive) for m in legal_moves(s[2])}
        for s in INFOSETS
    }


def independent_best_response(strategy, seat: str) -> float:
    """A best response by backward induction over the seat's information sets: at each
    set, the move whose value, summed over the deals and weighted by the chance and
    opponent's reach of that set, is highest (a different algorithm from the module's
    enumeration of pure strategies)."""
    me = 0 if seat == "first" else 1
    sign = 1 if seat == "first" else -1

    def value(history, deals_reach):
        """deals_reach: {deal: chance x opponent reach} of states with this history."""
        actor = to_act(history)
        if actor is None:
            return sum(r * sign * payoff(d, history) for d, r in deals_reach.items())
        if actor == seat:
            # The set is (my card, history): choose per card.
            total = 0.0
            for card in CARDS:
                mine = {d: r for d, r in deals_reach.items() if d[me] == card}
                if mine:
                    total += max(value((*history, m), mine) for m in legal_moves(history))
            return total
        total = 0.0
        for m in legal_moves(history):
            reach = {
                d: r * strategy[(actor, d[1 - me], history)][m] for d, r in deals_reach.items()
            }
            total += value((*history, m), reach)
        return total

    return value((), {d: 1 / len(DEALS) for d in DEALS})


def random_strategy(rng: random.Random):
    return {
        s: dict(zip(legal_moves(s[2]), (1 - (p := rng.random()), p), strict=True)) for s in INFOSETS
    }


def test_twelve_information_sets_with_two_moves_each():
    assert len(INFOSETS) == 12
    assert {legal_moves(s[2]) for s in INFOSETS} == {("check", "bet"), ("fold", "call")}


def test_payoffs_of_every_line():
    assert payoff(("K", "Q"), ("check", "check")) == 1
    assert payoff(("J", "Q"), ("bet", "call")) == -2
    assert payoff(("J", "K"), ("bet", "fold")) == 1  # the second player folded
    assert payoff(("K", "J"), ("check", "bet", "fold")) == -1  # the first player folded
    assert payoff(("Q", "J"), ("check", "bet", "call")) == 2


@pytest.mark.parametrize("alpha", [Fraction(0), Fraction(1, 12), Fraction(1, 6), Fraction(1, 3)])
def test_the_equilibrium_family_is_unexploitable_and_worth_minus_one_eighteenth(alpha):
    eq = equilibrium(alpha)
    assert first_player_value(eq) == pytest.approx(-1 / 18, abs=1e-12)
    assert exploitability(eq) == pytest.approx(0.0, abs=1e-12)
    assert best_response_value(eq, "first") == pytest.approx(-1 / 18, abs=1e-12)
    assert best_response_value(eq, "second") == pytest.approx(1 / 18, abs=1e-12)


def test_known_exploitabilities():
    # Uniform random: 11/24 (OpenSpiel's NashConv of 0.91666 for Kuhn, halved).
    assert exploitability(uniform_random()) == pytest.approx(11 / 24, abs=1e-12)
    # Always bet or call: a best response bets a K and folds a J: (2 + 0 - 1) / 3 in
    # each seat, 1/3.
    assert exploitability(always(True)) == pytest.approx(1 / 3, abs=1e-12)
    # Always check or fold: a best response bets every card and the passive player
    # folds, in either seat: 1 chip a hand.
    assert exploitability(always(False)) == pytest.approx(1.0, abs=1e-12)


def test_the_best_response_agrees_with_backward_induction():
    rng = random.Random(0)
    strategies = [uniform_random(), equilibrium(), always(True), always(False)]
    strategies += [random_strategy(rng) for _ in range(20)]
    for strategy in strategies:
        for seat in ("first", "second"):
            assert best_response_value(strategy, seat) == pytest.approx(
                independent_best_response(strategy, seat), abs=1e-12
            )


def test_values_are_zero_sum_and_the_equilibrium_beats_random():
    u, eq = uniform_random(), equilibrium()
    assert value_against(u, eq) == pytest.approx(-value_against(eq, u), abs=1e-12)
    assert value_against(u, u) == pytest.approx(0.0, abs=1e-12)
    assert value_against(eq, u) > 0.1
    # A best response beats the equilibrium by nothing, random by its exploitability.
    for strategy in (u, eq):
        assert exploitability(strategy) >= -1e-12


def test_aggressive_probability_reads_bet_and_call():
    eq = equilibrium(Fraction(1, 6))
    assert aggressive_probability(eq, ("first", "K", ())) == pytest.approx(0.5)
    assert aggressive_probability(eq, ("first", "Q", ("check", "bet"))) == pytest.approx(0.5)
    assert aggressive_probability(eq, ("second", "J", ("check",))) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="alpha"):
        equilibrium(Fraction(1, 2))


def test_every_deal_is_equally_likely():
    assert sorted(DEALS) == sorted(itertools.permutations(CARDS, 2))
