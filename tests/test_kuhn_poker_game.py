"""Kuhn Poker as a game of the Game protocol (spag.game.kuhn_poker): the judge and its
chips, the prompts per seat, and the protocol's users (the self-play loop, the rewards,
the evaluation tally) running it without a game-specific branch."""

from __future__ import annotations

import pyarrow as pa
import pytest
from play_helpers import ScriptedBackend

from spag.data.tables import EPISODE_FIELDS
from spag.errors import SpagInputError
from spag.evaluation.games import tally
from spag.game.kuhn_poker import KUHN_POKER, parse_deal, read_move
from spag.game.rewards import assign_rewards
from spag.game.selfplay import POLICY, GameSpec, play_games
from spag.generation import Sampling


def hand(*contents: str) -> list[dict[str, str]]:
    return [{"role": KUHN_POKER.roles[i % 2], "content": c} for i, c in enumerate(contents)]


@pytest.mark.parametrize(
    "deal, moves, outcome, n",
    [
        ("kq", ["check", "check"], "first_wins_1", 2),
        ("jq", ["check", "check"], "second_wins_1", 2),
        ("jk", ["bet", "fold"], "first_wins_1", 2),
        ("qk", ["bet", "call"], "second_wins_2", 2),
        ("kj", ["check", "bet", "fold"], "second_wins_1", 3),
        ("qj", ["check", "bet", "call"], "first_wins_2", 3),
        ("kq", ["I call!"], "first_broke_rules", 1),  # call is not legal first
        ("kq", ["check", "hmm"], "second_broke_rules", 2),  # no move named
        ("kq", ["check"], "unfinished", 1),
    ],
)
def test_the_judge_and_its_chips(deal, moves, outcome, n):
    assert KUHN_POKER.judge(hand(*moves), deal, 2) == (outcome, n)
    assert outcome in KUHN_POKER.outcomes
    first, second = (KUHN_POKER.result(outcome, r) for r in KUHN_POKER.roles)
    assert first == -second  # zero-sum


def test_results_winners_and_rule_breaks():
    assert KUHN_POKER.result("first_wins_2", "first") == 2.0
    assert KUHN_POKER.result("second_wins_1", "first") == -1.0
    assert KUHN_POKER.result("first_broke_rules", "first") == -1.0
    assert KUHN_POKER.winner("second_wins_2") == "second"
    assert KUHN_POKER.winner("first_broke_rules") is None
    assert KUHN_POKER.rule_breaker("second_broke_rules") == "second"


def test_moves_are_read_as_words():
    assert read_move("I will Bet now") == "bet"
    assert read_move("checkmate") is None  # not the word check
    assert read_move("call, or fold?") == "call"  # the first one named
    with pytest.raises(SpagInputError, match="not a Kuhn Poker deal"):
        parse_deal("kk")


def test_each_seat_sees_its_own_card_and_its_legal_moves():
    prompts = KUHN_POKER.load_prompts()
    first = KUHN_POKER.play_prompt(prompts, [], "first", "kq", 2)
    assert "your card is K" in first and "(check or bet)" in first and "card is Q" not in first
    second = KUHN_POKER.play_prompt(prompts, hand("bet"), "second", "kq", 2)
    assert "your card is Q" in second and "(fold or call)" in second
    assert "  - first: bet" in second
    training = {KUHN_POKER.training_prompt(prompts, hand("check"), "second", "jq", 2, u / 10)
                for u in range(10)}  # fmt: skip
    assert len(training) > 1 and all("Q" in t and "check or bet" in t for t in training)


def test_a_prompts_file_without_the_card_is_refused(tmp_path):
    text = tmp_path / "p.yaml"
    good = KUHN_POKER.load_prompts(KUHN_POKER.default_prompts_path())
    text.write_text(
        "play: {rules: r, history_title: h, started: s, instruction: 'Move ({moves})', cue: c}\n"
        "training: {rules: [r], instructions: ['{card} {moves}'], history_titles: [h], "
        "started: [s], cue: c}\n"
    )
    with pytest.raises(SpagInputError, match=r"play.instruction.*\{card\}"):
        KUHN_POKER.load_prompts(text)
    assert good.cue


def test_self_play_runs_hands_to_their_end():
    """The batched loop plays Kuhn Poker through the protocol: each seat's prompt, the
    end of a hand after 2 or 3 moves, a rule break ending it at once."""

    def answer(_, prompt):
        if "your card is K" in prompt:
            return "bet" if "(check or bet)" in prompt else "call"
        if "your card is J" in prompt:
            return "check" if "(check or bet)" in prompt else "fold"
        return "raise!"  # not a move: a rule break

    backend = ScriptedBackend(answer)
    specs = [GameSpec(f"h{i}", deal) for i, deal in enumerate(["kj", "jk", "qk"])]
    games = play_games(
        specs,
        {POLICY: backend},
        KUHN_POKER.load_prompts(),
        seed=0,
        max_turns=2,
        sampling=Sampling(),
        game=KUHN_POKER,
    )
    verdicts = [KUHN_POKER.judge(g.history, g.spec.target_word, 2) for g in games]
    assert verdicts == [("first_wins_1", 2), ("second_wins_1", 3), ("first_broke_rules", 1)]
    assert [g.end_reason for g in games] == ["finished", "finished", "rule_break"]


def test_the_paper_rewards_and_the_tally_take_the_game():
    table = pa.Table.from_pylist(
        [
            {"episode_id": eid, "target_word": deal, "max_turns": 2, "history": hand(*moves)}
            for eid, deal, moves in [
                ("a", "kj", ["bet", "fold"]),  # first wins 1
                ("b", "jq", ["check", "bet", "fold"]),  # second wins 1
                ("c", "qj", ["check", "bet", "call"]),  # first wins 2
                ("d", "kq", ["fold"]),  # a rule break: no samples
            ]
        ],
        schema=pa.schema(EPISODE_FIELDS),
    )
    rows = assign_rewards(table, seed=0, source="t", game=KUHN_POKER).to_pylist()
    assert [(r["episode_id"], r["role"], r["turn"]) for r in rows] == [
        ("a", "first", 0), ("b", "second", 1), ("c", "first", 0), ("c", "first", 2),
    ]  # fmt: skip
    assert {r["role"]: r["weight"] for r in rows} == {"first": 3 / 4, "second": 3 / 2}
    counts = tally([("first", "first_wins_2"), ("second", "first_broke_rules")], KUHN_POKER)
    assert counts["all"] == {"games": 2, "wins": 2, "losses": 0, "ties": 0, "broke_rules": 1}
