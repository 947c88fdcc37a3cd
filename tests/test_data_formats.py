"""JSON data readers, spag prepare-sft, and the contracts of the shipped data files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spag.cli import main
from spag.data.formats import (
    ALPACA_PROMPT_INPUT,
    ALPACA_PROMPT_NO_INPUT,
    detect_format,
    load_games_json,
    load_instructions,
    load_instructions_json,
    sample_rows,
)
from spag.data.tables import EPISODE_FIELDS
from spag.errors import SpagInputError

DATA = Path(__file__).resolve().parents[1] / "data"

GAME = {
    "history": [
        {"role": "attacker", "content": "It has keys but opens no doors."},
        {"role": "defender", "content": "I know the word! It is piano!"},
    ],
    "target_word": "piano",
    "max_turns": 5,
}


def dump(tmp_path: Path, obj, name: str = "data.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(obj), encoding="utf-8")
    return p


# --- games ----------------------------------------------------------------------------


def test_games_to_episode_contract(tmp_path):
    games = [GAME, {**GAME, "id": "g-7", "outcome": "defender_wins", "winner": "defender"}]
    table = load_games_json(dump(tmp_path, games))
    for field in EPISODE_FIELDS:
        assert table.schema.field(field.name).type == field.type
    assert table.column("episode_id").to_pylist() == ["demo-00000", "g-7"]
    assert table.column("outcome").to_pylist() == [None, "defender_wins"]
    assert "winner" not in table.column_names
    assert table.column("history").to_pylist()[0] == GAME["history"]


def test_games_without_outcome_have_no_outcome_column(tmp_path):
    table = load_games_json(dump(tmp_path, [{**GAME, "episode_id": 12}]))
    assert table.column_names == [f.name for f in EPISODE_FIELDS]
    assert table.column("episode_id").to_pylist() == ["12"]


def test_games_json_lines(tmp_path):
    p = tmp_path / "games.jsonl"
    p.write_text("\n".join(json.dumps({**GAME, "id": f"x{i}"}) for i in range(3)) + "\n")
    assert detect_format(p) == "games"
    assert load_games_json(p).num_rows == 3


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"max_turns": None}, "game 1: key 'max_turns'"),
        ({"max_turns": "5"}, "game 1: key 'max_turns'"),
        ({"target_word": 3}, "game 1: key 'target_word'"),
        ({"target_word": "rm -rf"}, "game 1: key 'target_word'"),
        ({"history": "hello"}, "game 1: key 'history' must be a list"),
        ({"history": [{"role": "defender", "content": "hi"}]}, "history[0] key 'role'"),
        (
            {
                "history": [
                    {"role": "attacker", "content": "a"},
                    {"role": "attacker", "content": "b"},
                ]
            },
            "history[1] key 'role' is 'attacker', expected 'defender'",
        ),
        ({"history": [{"role": "attacker"}]}, "history[0] must be an object"),
        ({"history": [{"role": "attacker", "content": 5}]}, "history[0] key 'content'"),
        ({"id": "demo-00000"}, "game 1: episode id 'demo-00000' repeats game 0"),
    ],
)
def test_games_errors_name_file_game_and_key(tmp_path, change, fragment):
    p = dump(tmp_path, [GAME, {**GAME, **change}])
    with pytest.raises(SpagInputError) as err:
        load_games_json(p)
    assert str(p) in str(err.value) and fragment in str(err.value)


def test_games_missing_key(tmp_path):
    bad = {k: v for k, v in GAME.items() if k != "target_word"}
    with pytest.raises(SpagInputError, match=r"game 0: missing key 'target_word'"):
        load_games_json(dump(tmp_path, [bad]))


# --- instruction data -----------------------------------------------------------------


def test_instructions_and_detection(tmp_path):
    p = dump(tmp_path, [{"query": "2+2?", "target": " 4 \n"}, {"query": "Hi", "target": "Hello"}])
    assert detect_format(p) == "instructions"
    t = load_instructions_json(p)
    assert t.schema == pa.schema([("query", pa.string()), ("target", pa.string())])
    assert t.to_pylist() == [{"query": "2+2?", "target": "4"}, {"query": "Hi", "target": "Hello"}]


def test_alpaca_layout(tmp_path):
    p = dump(
        tmp_path,
        [
            {"instruction": "Name a colour.", "input": "", "output": "Blue."},
            {"instruction": "Add the numbers.", "input": "2, 3", "output": "5"},
            {"instruction": "Say hi.", "output": "Hi."},
        ],
    )
    assert detect_format(p) == "alpaca"
    rows = load_instructions_json(p).to_pylist()
    assert rows[0]["query"] == (
        "Below is an instruction that describes a task. Write a response that appropriately "
        "completes the request.\n\n### Instruction:\nName a colour.\n\n### Response:"
    )
    assert rows[1]["query"] == (
        "Below is an instruction that describes a task, paired with an input that provides "
        "further context. Write a response that appropriately completes the request.\n\n"
        "### Instruction:\nAdd the numbers.\n\n### Input:\n2, 3\n\n### Response:"
    )
    assert rows[2]["query"] == ALPACA_PROMPT_NO_INPUT.format(instruction="Say hi.")
    assert [r["target"] for r in rows] == ["Blue.", "5", "Hi."]
    assert "{input}" in ALPACA_PROMPT_INPUT


def test_instruction_json_lines(tmp_path):
    p = tmp_path / "sft.jsonl"
    p.write_text('{"query": "a", "target": "b"}\n\n{"query": "c", "target": "d"}\n')
    assert load_instructions_json(p).num_rows == 2
    p.write_text('{"query": "a", "target": "b"}\n{"query": "c", "target": \n')
    with pytest.raises(SpagInputError, match=rf"{re.escape(str(p))}:2: bad JSON Lines"):
        load_instructions_json(p)


@pytest.mark.parametrize(
    "records, fragment",
    [
        ([{"query": "q", "target": "t"}, {"query": "q"}], "record 1: missing key 'target'"),
        ([{"query": "q", "target": "t"}, {"query": "q", "target": 3}], "record 1: key 'target'"),
        ([{"query": "q", "target": "  "}], "record 0: key 'target' is empty"),
        ([{"instruction": "", "output": "x"}], "record 0: key 'instruction' is empty"),
        (
            [{"instruction": "i", "output": "o"}, {"instruction": "i"}],
            "record 1: missing key 'output'",
        ),
        ([{"text": "hello"}], "record 0 is none of the known formats"),
        ([], "no records"),
        ({"query": 1, "target": 2}, "record 0: key 'query'"),
        ([GAME], "holds games"),
    ],
)
def test_instruction_errors(tmp_path, records, fragment):
    p = dump(tmp_path, records)
    with pytest.raises(SpagInputError) as err:
        load_instructions_json(p)
    assert str(p) in str(err.value) and fragment in str(err.value)


def test_not_json_and_missing(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("this is not json\n")
    with pytest.raises(SpagInputError, match="not JSON or JSON Lines"):
        detect_format(p)
    with pytest.raises(SpagInputError, match="not found"):
        detect_format(tmp_path / "missing.json")


def test_sample_rows_is_seeded_and_keeps_order():
    t = pa.table({"query": [str(i) for i in range(50)], "target": ["x"] * 50})
    a = sample_rows(t, 10, seed=1).column("query").to_pylist()
    assert a == sample_rows(t, 10, seed=1).column("query").to_pylist()
    assert a != sample_rows(t, 10, seed=2).column("query").to_pylist()
    assert a == sorted(a, key=int) and len(set(a)) == 10
    assert sample_rows(t, 500, seed=1).num_rows == 50


# --- spag prepare-sft -----------------------------------------------------------------


def test_prepare_sft_cli(tmp_path):
    out = tmp_path / "sft.parquet"
    assert main(["prepare-sft", "--input", str(DATA / "demo_sft.json"), "--output", str(out)]) == 0
    full = pq.read_table(out)
    assert full.column_names == ["query", "target"] and full.num_rows >= 60
    assert (
        main(
            [
                "prepare-sft",
                "--input",
                str(DATA / "demo_sft_alpaca.json"),
                "--output",
                str(out),
                "--max-rows",
                "4",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    part = pq.read_table(out)
    assert part.num_rows == 4
    assert all(q.startswith("Below is an instruction") for q in part.column("query").to_pylist())
    # A Parquet input (query/target) passes through.
    again = tmp_path / "again.parquet"
    assert main(["prepare-sft", "--input", str(out), "--output", str(again)]) == 0
    assert pq.read_table(again).equals(part)
    assert load_instructions(again).num_rows == 4


def test_prepare_sft_cli_error(tmp_path, capsys):
    out = tmp_path / "sft.parquet"
    rc = main(["prepare-sft", "--input", str(DATA / "demo_games.json"), "--output", str(out)])
    assert rc == 2 and "holds games" in capsys.readouterr().err
    assert not out.exists()


# --- the shipped data -----------------------------------------------------------------

GUESS_RE = re.compile(r"i know the word! it")


def shipped_games() -> list[dict]:
    return json.loads((DATA / "demo_games.json").read_text(encoding="utf-8"))


def test_demo_games_contract():
    games = shipped_games()
    assert 60 <= len(games) <= 80
    table = load_games_json(DATA / "demo_games.json")
    assert table.num_rows == len(games)
    assert len(set(table.column("target_word").to_pylist())) >= 30
    for g in games:
        assert g["max_turns"] == 5
        roles = [m["role"] for m in g["history"]]
        assert roles == ["attacker", "defender"] * (len(roles) // 2) + ["attacker"] * (
            len(roles) % 2
        )
        assert 1 <= len(roles) <= 10
        for m in g["history"]:
            assert m["content"] == m["content"].strip() and m["content"]
            if GUESS_RE.search(m["content"].lower()):
                # The guess phrase is verbatim, with the exact case and punctuation.
                assert re.search(r"I know the word! It is [a-z]+!", m["content"]), m["content"]


def test_demo_games_cover_every_outcome_and_both_winners():
    outcomes = [g["outcome"] for g in shipped_games()]
    counts = {o: outcomes.count(o) for o in set(outcomes)}
    assert set(counts) == {"attacker_wins", "defender_wins", "tie", "attacker_broke_rules"}
    decisive = counts["attacker_wins"] + counts["defender_wins"]
    assert decisive > len(outcomes) / 2
    assert min(counts["attacker_wins"], counts["defender_wins"]) >= decisive / 4


def test_demo_games_recorded_outcomes_match_the_judge():
    judge = pytest.importorskip("spag.judge")
    for g in shipped_games():
        outcome, n = judge.judge_game(g["history"], g["target_word"], g["max_turns"])
        assert outcome == g["outcome"], g["id"]
        if outcome != "tie":
            # Decisive and rule-breaking games end at their deciding message.
            assert n >= len(g["history"]) - 1, g["id"]


def test_demo_sft_files():
    sft = load_instructions_json(DATA / "demo_sft.json")
    assert 60 <= sft.num_rows <= 100
    assert len(set(sft.column("query").to_pylist())) == sft.num_rows
    assert detect_format(DATA / "demo_sft_alpaca.json") == "alpaca"
    alpaca = json.loads((DATA / "demo_sft_alpaca.json").read_text(encoding="utf-8"))
    assert len(alpaca) == 10
    assert any(r["input"] for r in alpaca) and any(not r["input"] for r in alpaca)


def test_a_killed_builds_folder_is_removed_by_the_next(tmp_path):
    """A killed model build leaves its temporary folder (gigabytes for a 7B model); the
    next build of the same output removes it."""
    from spag.data.tables import atomic_dir

    stale = tmp_path / ".base_model.k1ll3d"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"x" * 1024)
    other = tmp_path / ".other_model.keep"
    other.mkdir()
    with atomic_dir(tmp_path / "base_model") as tmp:
        (tmp / "config.json").write_text("{}")
    assert (tmp_path / "base_model" / "config.json").exists()
    assert not stale.exists() and other.exists()
