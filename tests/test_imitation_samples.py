"""imitation-samples: demonstration games and instruction data to samples."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spag.cli import main
from spag.data.tables import SAMPLE_SCHEMA
from spag.judge import judge_game

DATA = Path(__file__).resolve().parents[1] / "data"


def run(tmp_path, *args) -> pa.Table:
    out = tmp_path / "samples.parquet"
    assert main(["imitation-samples", "--output", str(out), "--input", *map(str, args)]) == 0
    table = pq.read_table(out)
    assert table.schema == SAMPLE_SCHEMA
    return table


def test_demo_games_json(tmp_path):
    import json

    games = json.loads((DATA / "demo_games.json").read_text())
    expected = 0
    for g in games:
        outcome, n = judge_game(g["history"], g["target_word"], g["max_turns"])
        if outcome in ("attacker_wins", "defender_wins"):
            winner = outcome.split("_")[0]
            expected += sum(1 for m in g["history"][:n] if m["role"] == winner)
    table = run(tmp_path, DATA / "demo_games.json", "--seed", "1")
    assert table.num_rows == expected > 0
    rows = table.to_pylist()
    assert {r["type"] for r in rows} == {"game"}
    assert all(r["reward"] == 1.0 and r["weight"] == 1.0 for r in rows)
    again = run(tmp_path, DATA / "demo_games.json", "--seed", "1")
    assert again.equals(table)


@pytest.mark.parametrize("name", ["demo_sft.json", "demo_sft_alpaca.json"])
def test_instruction_json(tmp_path, name):
    table = run(tmp_path, DATA / name)
    rows = table.to_pylist()
    assert rows and {r["type"] for r in rows} == {"sft"}
    assert all(r["role"] is None and r["weight"] == 1.0 for r in rows)


def test_instruction_parquet(tmp_path):
    src = tmp_path / "sft.parquet"
    pq.write_table(pa.table({"query": ["a", "b"], "target": ["x", "y"]}), src)
    rows = run(tmp_path, src).to_pylist()
    assert [(r["query"], r["target"], r["type"]) for r in rows] == [
        ("a", "x", "sft"),
        ("b", "y", "sft"),
    ]


def test_several_inputs_are_concatenated(tmp_path):
    games = run(tmp_path, DATA / "demo_games.json").num_rows
    sft = run(tmp_path, DATA / "demo_sft.json").num_rows
    both = run(tmp_path, DATA / "demo_games.json", DATA / "demo_sft.json")
    assert both.num_rows == games + sft
