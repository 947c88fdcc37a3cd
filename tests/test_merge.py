"""merge-episodes: shards concatenated, games judged, outcome counts written."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from spag.cli import main
from spag.data.tables import EPISODE_FIELDS

ROLES = ("attacker", "defender")


def shard(rows, extra=None) -> pa.Table:
    table = pa.Table.from_pylist(
        [
            {
                "episode_id": eid,
                "target_word": word,
                "max_turns": 5,
                "history": [{"role": ROLES[i % 2], "content": c} for i, c in enumerate(msgs)],
            }
            for eid, word, msgs in rows
        ],
        schema=pa.schema(EPISODE_FIELDS),
    )
    for name, values in (extra or {}).items():
        table = table.append_column(name, pa.array(values))
    return table


def test_merge_judges_and_counts(tmp_path):
    a = tmp_path / "shard_000.parquet"
    b = tmp_path / "shard_001.parquet"
    pq.write_table(
        shard([("e1", "cat", ["hi", "my cat"]), ("e2", "cat", ["cat"])], {"shard": [0, 0]}), a
    )
    pq.write_table(
        shard(
            [("e3", "dog", ["hi", "I know the word! It is dog!"]), ("e4", "dog", [])],
            {"seed": [7, 7]},
        ),
        b,
    )
    out = tmp_path / "episodes.parquet"
    counts = tmp_path / "counts.tsv"
    args = ["merge-episodes", "--inputs", str(a), str(b), "--output", str(out)]
    assert main([*args, "--counts", str(counts), "--epoch", "2"]) == 0
    table = pq.read_table(out)
    assert table.column("outcome").to_pylist() == [
        "attacker_wins",
        "attacker_broke_rules",
        "defender_wins",
        "tie",
    ]
    assert table.column("num_messages").to_pylist() == [2, 1, 2, 0]
    assert table.column("shard").to_pylist() == [0, 0, None, None]
    assert table.column("seed").to_pylist() == [None, None, 7, 7]
    lines = counts.read_text().splitlines()
    outcomes = ["attacker_wins", "defender_wins", "attacker_broke_rules", "tie"]
    assert lines[0].split("\t") == ["epoch", *outcomes, "total"]
    assert lines[1].split("\t") == ["2", "1", "1", "1", "1", "4"]

    # Without --epoch: no epoch column; outcomes absent are written as 0.
    assert (
        main(["merge-episodes", "--inputs", str(a), "--output", str(out), "--counts", str(counts)])
        == 0
    )
    header, row = (line.split("\t") for line in counts.read_text().splitlines())
    assert dict(zip(header, row, strict=True)) == {
        "attacker_wins": "1",
        "defender_wins": "0",
        "attacker_broke_rules": "1",
        "tie": "0",
        "total": "2",
    }


def test_duplicate_ids_across_shards_name_both_files(tmp_path, capsys):
    a = tmp_path / "a.parquet"
    b = tmp_path / "b.parquet"
    pq.write_table(shard([("e1", "cat", ["hi"])]), a)
    pq.write_table(shard([("e1", "cat", ["hello"])]), b)
    out = tmp_path / "episodes.parquet"
    counts = tmp_path / "counts.tsv"
    assert (
        main(
            [
                "merge-episodes",
                "--inputs",
                str(a),
                str(b),
                "--output",
                str(out),
                "--counts",
                str(counts),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "'e1'" in err and str(a) in err and str(b) in err
    assert not out.exists() and not counts.exists()


def test_bad_shard_is_named(tmp_path, capsys):
    a = tmp_path / "a.parquet"
    bad = tmp_path / "bad.parquet"
    pq.write_table(shard([("e1", "cat", ["hi"])]), a)
    pq.write_table(shard([("e2", "cat", ["hi"])]).drop_columns(["history"]), bad)
    out = tmp_path / "episodes.parquet"
    assert (
        main(
            [
                "merge-episodes",
                "--inputs",
                str(a),
                str(bad),
                "--output",
                str(out),
                "--counts",
                str(tmp_path / "c.tsv"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert str(bad) in err and "history" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "bad.parquet"]
