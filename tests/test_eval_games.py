"""``spag eval-games``: per-role win / loss / tie counts of the evaluation games."""

from __future__ import annotations

import csv

import pyarrow as pa
import pytest
from spag.cli import main
from spag.eval_table import COLUMNS, game_result, tally
from spag.selfplay import SHARD_SCHEMA
from spag.tables import write_parquet

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
    assert game_result("attacker_wins", "attacker") == "win"
    assert game_result("attacker_wins", "defender") == "loss"
    assert game_result("attacker_broke_rules", "attacker") == "loss"
    assert game_result("attacker_broke_rules", "defender") == "win"
    assert game_result("tie", "defender") == "tie"
    counts = tally([("attacker", "tie"), ("defender", "defender_wins")])
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
