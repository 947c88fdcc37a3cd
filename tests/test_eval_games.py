"""``spag eval-games``: per-role win / loss / tie counts of the evaluation games, and the
Wilson score intervals of their rates."""

from __future__ import annotations

import csv
import math

import pyarrow as pa
import pytest

from spag.cli import main
from spag.data.tables import write_parquet
from spag.evaluation.games import (
    COLUMNS,
    COUNT_COLUMNS,
    RATE_COLUMNS,
    game_result,
    rates,
    tally,
    wilson_interval,
)
from spag.game.selfplay import SHARD_SCHEMA
from spag.game.taboo import TABOO

GUESS_OK = "I know the word! It is apple!"
GUESS_BAD = "I know the word! It is pear!"


def _row(eid, policy_role, history, word="apple", epoch=2):
    other = "defender" if policy_role == "attacker" else "attacker"
    row = {f.name: None for f in SHARD_SCHEMA}
    row.update(
        episode_id=eid,
        target_word=word,
        max_turns=2,
        epoch=epoch,
        shard=0,
        seed=0,
        policy_role=policy_role,
        num_generated_tokens=0,
        message_tokens=[],
        empty_replies=0,
        truncated_replies=0,
        truncated_prompts=0,
        end_reason="x",
        history=[
            {"role": "attacker" if i % 2 == 0 else "defender", "content": c}
            for i, c in enumerate(history)
        ],
    )
    row[f"{policy_role}_model"] = "m2"
    row[f"{other}_model"] = "base"
    return row


def _games(tmp_path, rows):
    path = tmp_path / "eval.parquet"
    write_parquet(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA), path)
    return path


def _read(path):
    with open(path, newline="", encoding="utf-8") as f:
        return {r["role"]: r for r in csv.DictReader(f, delimiter="\t")}


def test_results_from_each_side():
    assert game_result("attacker_wins", "attacker", game=TABOO) == "win"
    assert game_result("attacker_wins", "defender", game=TABOO) == "loss"
    assert game_result("attacker_broke_rules", "attacker", game=TABOO) == "loss"
    assert game_result("attacker_broke_rules", "defender", game=TABOO) == "win"
    assert game_result("tie", "defender", game=TABOO) == "tie"
    counts = tally([("attacker", "tie"), ("defender", "defender_wins")], game=TABOO)
    assert counts["all"] == {"games": 2, "wins": 1, "losses": 0, "ties": 1, "broke_rules": 0}


def test_eval_games_table(tmp_path):
    rows = [
        # model attacks: a win (the defender says the word), a rule break, a tie
        _row("a1", "attacker", ["hint", "an apple"]),
        _row("a2", "attacker", ["apple!"]),
        _row("a3", "attacker", ["hint", "no idea", "hint", "still no idea"]),
        # model defends: a right guess, a wrong guess, the opponent breaks the rules
        _row("d1", "defender", ["hint", GUESS_OK]),
        _row("d2", "defender", ["hint", GUESS_BAD]),
        _row("d3", "defender", ["an apple a day"]),
    ]
    out = tmp_path / "table.tsv"
    assert (
        main(["eval-games", "--episodes", str(_games(tmp_path, rows)), "--output", str(out)]) == 0
    )
    header = out.read_text(encoding="utf-8").splitlines()[0].split("\t")
    assert header == list(COLUMNS)
    t = _read(out)
    assert list(t) == ["attacker", "defender", "all"]
    a, d, both = t["attacker"], t["defender"], t["all"]
    assert (a["games"], a["wins"], a["losses"], a["ties"], a["broke_rules"]) == (
        "3",
        "1",
        "1",
        "1",
        "1",
    )
    assert (d["games"], d["wins"], d["losses"], d["ties"], d["broke_rules"]) == (
        "3",
        "2",
        "1",
        "0",
        "1",
    )
    assert (both["games"], both["wins"], both["losses"], both["ties"]) == ("6", "3", "2", "1")
    assert float(both["win_rate"]) == pytest.approx(0.5)
    assert float(a["tie_rate"]) == pytest.approx(1 / 3)
    # Every rate comes with its 95% Wilson interval, from the same counts.
    for row, (n, wins, broke) in ((a, (3, 1, 1)), (d, (3, 2, 1)), (both, (6, 3, 2))):
        assert float(row["broke_rules_rate"]) == pytest.approx(broke / n)
        for kind, k in (("win", wins), ("broke_rules", broke)):
            lo, hi = wilson_interval(k, n)
            assert float(row[f"{kind}_rate_lo"]) == pytest.approx(lo, abs=1e-6)
            assert float(row[f"{kind}_rate_hi"]) == pytest.approx(hi, abs=1e-6)
            assert float(row[f"{kind}_rate_lo"]) <= float(row[f"{kind}_rate"])
            assert float(row[f"{kind}_rate"]) <= float(row[f"{kind}_rate_hi"])
    assert float(a["loss_rate_lo"]) == pytest.approx(wilson_interval(1, 3)[0], abs=1e-6)
    assert (d["tie_rate"], d["tie_rate_lo"]) == ("0.000000", "0.000000")
    assert {r["epoch"] for r in t.values()} == {"2"}
    assert {r["model"] for r in t.values()} == {"m2"}
    assert {r["opponent"] for r in t.values()} == {"base"}


def test_eval_games_options_and_empty_role(tmp_path):
    rows = [_row("a1", "attacker", ["hint", "an apple"])]
    out = tmp_path / "t.tsv"
    assert (
        main(
            [
                "eval-games",
                "--episodes",
                str(_games(tmp_path, rows)),
                "--output",
                str(out),
                "--epoch",
                "7",
                "--model-name",
                "mine",
            ]
        )
        == 0
    )
    t = _read(out)
    assert t["attacker"]["epoch"] == "7" and t["attacker"]["model"] == "mine"
    assert t["defender"]["games"] == "0" and t["defender"]["win_rate"] == "nan"
    # No games, no interval.
    assert {t["defender"][c] for c in RATE_COLUMNS} == {"nan"}


def test_eval_games_rejects_self_play_episodes(tmp_path, capsys):
    rows = [_row("a1", "attacker", ["hint"])]
    rows[0]["policy_role"] = None
    out = tmp_path / "t.tsv"
    assert (
        main(["eval-games", "--episodes", str(_games(tmp_path, rows)), "--output", str(out)]) == 2
    )
    err = capsys.readouterr().err
    assert "a1" in err and "policy_role" in err
    assert not out.exists()
    assert (
        main(["eval-games", "--episodes", str(tmp_path / "none.parquet"), "--output", str(out)])
        == 2
    )


@pytest.mark.parametrize(
    "k,n,lo,hi",
    [
        (8, 10, 0.4902, 0.9433),  # the textbook example
        (5, 10, 0.2366, 0.7634),
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (1, 1, 0.2065, 1.0),
        (0, 1, 0.0, 0.7935),
        (81, 263, 0.2553, 0.3662),  # Newcombe (1998), Stat. Med. 17: 857, table I
    ],
)
def test_wilson_interval_known_values(k, n, lo, hi):
    assert wilson_interval(k, n) == pytest.approx((lo, hi), abs=5e-5)


@pytest.mark.parametrize("n", [1, 2, 7, 40])
def test_wilson_interval_edges_and_symmetry(n):
    bounds = [wilson_interval(k, n) for k in range(n + 1)]
    assert bounds[0][0] == 0.0 and bounds[n][1] == 1.0  # exact, not 1e-17 off
    for k, (lo, hi) in enumerate(bounds):
        assert 0.0 <= lo <= k / n <= hi <= 1.0
        assert lo < hi  # never empty, even at k = 0 or k = n
        # k successes and n - k failures: the same interval, mirrored
        assert (lo, hi) == pytest.approx((1 - bounds[n - k][1], 1 - bounds[n - k][0]))
    assert [b[0] for b in bounds] == sorted(b[0] for b in bounds)
    assert [b[1] for b in bounds] == sorted(b[1] for b in bounds)


def test_wilson_interval_narrows_with_more_games_and_rejects_bad_counts():
    widths = [hi - lo for lo, hi in (wilson_interval(n // 2, n) for n in (10, 100, 1000))]
    assert widths == sorted(widths, reverse=True)
    assert all(math.isnan(x) for x in wilson_interval(0, 0))
    with pytest.raises(ValueError, match="outside"):
        wilson_interval(4, 3)
    with pytest.raises(ValueError, match="outside"):
        wilson_interval(-1, 3)


def test_rates_of_one_row():
    r = rates({"games": 10, "wins": 8, "losses": 1, "ties": 1, "broke_rules": 0})
    assert set(r) == set(RATE_COLUMNS)
    assert r["win_rate"] == 0.8
    assert (r["win_rate_lo"], r["win_rate_hi"]) == pytest.approx((0.4902, 0.9433), abs=5e-5)
    assert r["broke_rules_rate"] == 0.0 and r["broke_rules_rate_lo"] == 0.0
    assert all(math.isnan(v) for v in rates(dict.fromkeys(COUNT_COLUMNS, 0)).values())
