"""Self-play: the game loop (scripted backends) and ``spag play`` end to end on the tiny model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from play_helpers import (
    WORDS,
    ScriptedBackend,
    child_command,
    write_words,
)
from workflow_utils import failing_shards_env

from spag.cli import main
from spag.game.selfplay import (
    OPPONENT,
    POLICY,
    SHARD_SCHEMA,
    evaluation_specs,
    games_table,
    play_games,
    selfplay_specs,
    shard_seed,
)
from spag.game.taboo import TABOO
from spag.generation import Sampling


class KeyPrompts:
    """Prompts that name the speaker, the word and the message index (easy to script)."""

    def play_prompt(self, history, role, target_word, max_turns):
        return f"{role}|{target_word}|{len(history)}"


def _field(prompt: str, i: int) -> str:
    return prompt.split("|")[i]


# ---------------------------------------------------------------- game loop


def test_finished_games_leave_the_batch():
    # apple: the defender guesses at message 2; river: the defender says the word at
    # message 4; candle: the attacker says it at message 3; others run to 2T messages.
    def answer(i, prompt):
        role, word, n = _field(prompt, 0), _field(prompt, 1), int(_field(prompt, 2))
        if role == "defender" and word == "apple" and n == 1:
            return "I know the word! It is pear!"
        if role == "defender" and word == "river" and n == 3:
            return "maybe a river?"
        if role == "attacker" and word == "candle" and n == 2:
            return "think of a candle"
        return "something else"

    backend = ScriptedBackend(answer)
    specs = selfplay_specs(
        ["apple", "river", "candle", "garden"], epoch=1, shard_index=2, games_per_word=1
    )
    games = play_games(
        specs, {POLICY: backend}, KeyPrompts(), sampling=Sampling(), max_turns=3, seed=0, game=TABOO
    )
    assert [c["n"] for c in backend.calls] == [4, 4, 3, 2, 1, 1]
    lengths = {g.spec.target_word: len(g.history) for g in games}
    assert lengths == {"apple": 2, "river": 4, "candle": 3, "garden": 6}
    reasons = {g.spec.target_word: g.end_reason for g in games}
    assert reasons == {
        "apple": "guess",
        "river": "judged",
        "candle": "judged",
        "garden": "max_turns",
    }
    # Messages alternate, attacker first; output keeps the spec order.
    assert [g.spec.episode_id for g in games] == [s.episode_id for s in specs]
    for g in games:
        assert [m["role"] for m in g.history] == ((["attacker", "defender"] * 3)[: len(g.history)])
        assert len(g.history) == len(g.message_tokens)


def test_guess_phrase_in_any_case_ends_the_game():
    backend = ScriptedBackend(
        lambda i, p: "I KNOW THE WORD, honestly" if _field(p, 0) == "defender" else "hello"
    )
    (g,) = play_games(
        selfplay_specs(["apple"], 0, 0, 1),
        {POLICY: backend},
        KeyPrompts(),
        sampling=Sampling(),
        max_turns=5,
        seed=0,
        game=TABOO,
    )
    assert len(g.history) == 2 and g.end_reason == "guess"


def test_empty_replies_are_recorded_not_fatal():
    backend = ScriptedBackend(lambda i, p: "" if _field(p, 0) == "attacker" else "ok")
    games = play_games(
        selfplay_specs(["apple", "river"], 0, 0, 1),
        {POLICY: backend},
        KeyPrompts(),
        sampling=Sampling(),
        max_turns=2,
        seed=0,
        game=TABOO,
    )
    for g in games:
        assert [m["content"] for m in g.history] == ["", "ok", "", "ok"]
        assert g.empty_replies == 2
    table = games_table(
        games, max_turns=2, epoch=0, shard=0, seed=1, model_names={POLICY: "m"}, game=TABOO
    )
    assert table.column("empty_replies").to_pylist() == [2, 2]


def test_opponent_mode_two_games_per_word_with_roles():
    policy = ScriptedBackend(lambda i, p: "policy says hi")
    opponent = ScriptedBackend(lambda i, p: "opponent says hi")
    specs = evaluation_specs(["apple", "river"], epoch=3, shard_index=0, game=TABOO)
    games = play_games(
        specs,
        {POLICY: policy, OPPONENT: opponent},
        KeyPrompts(),
        max_turns=1,
        sampling=Sampling(temperature=0.0),
        seed=0,
        game=TABOO,
    )
    assert len(games) == 4
    table = games_table(
        games,
        max_turns=1,
        epoch=3,
        shard=0,
        seed=5,
        model_names={POLICY: "m3", OPPONENT: "base"},
        game=TABOO,
    )
    rows = table.to_pylist()
    assert [r["policy_role"] for r in rows] == ["attacker", "defender"] * 2
    for r in rows:
        speakers = {"attacker": r["attacker_model"], "defender": r["defender_model"]}
        assert speakers[r["policy_role"]] == "m3"
        assert "base" in speakers.values()
        for m in r["history"]:
            expected = "policy" if speakers[m["role"]] == "m3" else "opponent"
            assert m["content"].startswith(expected)
    assert len({r["episode_id"] for r in rows}) == 4
    # Each turn's prompts are grouped by the model that speaks: one call per model per turn.
    assert [c["n"] for c in policy.calls] == [2, 2]
    assert [c["n"] for c in opponent.calls] == [2, 2]
    assert all(c["greedy"] for c in policy.calls + opponent.calls)


def test_shard_seed_depends_on_run_seed_epoch_and_shard():
    seeds = {shard_seed(s, e, i) for s in (0, 1) for e in (0, 1) for i in (0, 1)}
    assert len(seeds) == 8
    assert shard_seed(3, 1, 2) == shard_seed(3, 1, 2)


def test_games_table_schema_even_when_empty():
    table = games_table(
        [], max_turns=5, epoch=0, shard=0, seed=0, model_names={POLICY: "m"}, game=TABOO
    )
    assert table.schema == SHARD_SCHEMA and table.num_rows == 0


# ---------------------------------------------------------------- spag play on the tiny model


def _play(model, words, out, *extra) -> int:
    return main(
        [
            "play",
            "--model",
            str(model),
            "--words",
            str(words),
            "--output",
            str(out),
            "--max-turns",
            "2",
            "--max-new-tokens",
            "6",
            "--no-progress",
            *extra,
        ]
    )


@pytest.fixture
def words_file(tmp_path):
    return write_words(tmp_path / "words.txt", WORDS[:5])


def test_same_inputs_give_a_byte_identical_shard(tiny_model_dir, words_file, tmp_path):
    a, b, c = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"
    assert _play(tiny_model_dir, words_file, a, "--seed", "3", "--epoch", "1") == 0
    assert _play(tiny_model_dir, words_file, b, "--seed", "3", "--epoch", "1") == 0
    assert _play(tiny_model_dir, words_file, c, "--seed", "3", "--epoch", "2") == 0
    assert a.read_bytes() == b.read_bytes()
    ta, tc = pq.read_table(a), pq.read_table(c)
    assert ta.column("history").to_pylist() != tc.column("history").to_pylist()
    rows = ta.to_pylist()
    assert [r["target_word"] for r in rows] == WORDS[:5]
    for r in rows:
        assert r["episode_id"] == f"e1-s000-{r['target_word']}-0"
        assert r["policy_role"] is None and r["attacker_model"] == r["defender_model"]
        assert r["num_generated_tokens"] == sum(r["message_tokens"]) > 0
        assert r["max_turns"] == 2 and 1 <= len(r["history"]) <= 4
        assert r["seed"] == shard_seed(3, 1, 0)
    for f in ("episode_id", "target_word", "max_turns", "history"):
        assert ta.schema.field(f).type == SHARD_SCHEMA.field(f).type


def test_shards_split_the_word_list(tiny_model_dir, tmp_path):
    words = write_words(tmp_path / "w.txt", WORDS)
    seen, ids = [], set()
    for i in range(3):
        out = tmp_path / f"shard_{i:03d}.parquet"
        assert (
            _play(
                tiny_model_dir,
                words,
                out,
                "--shard-index",
                str(i),
                "--num-shards",
                "3",
                "--max-turns",
                "1",
                "--max-new-tokens",
                "3",
            )
            == 0
        )
        t = pq.read_table(out)
        seen += t.column("target_word").to_pylist()
        ids |= set(t.column("episode_id").to_pylist())
        assert set(t.column("shard").to_pylist()) <= {i}
    assert sorted(seen) == sorted(WORDS)
    assert len(ids) == len(WORDS)


def test_opponent_games_from_the_cli(tiny_model_dir, words_file, tmp_path):
    out = tmp_path / "eval.parquet"
    assert (
        _play(
            tiny_model_dir,
            words_file,
            out,
            "--opponent",
            str(tiny_model_dir),
            "--model-name",
            "m1",
            "--opponent-name",
            "base",
            "--epoch",
            "1",
        )
        == 0
    )
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 2 * 5
    for r in rows:
        assert r["policy_role"] in ("attacker", "defender")
        assert r[f"{r['policy_role']}_model"] == "m1"
        assert "base" in (r["attacker_model"], r["defender_model"])
    # Greedy by default in evaluation: replaying gives the same games.
    again = tmp_path / "eval2.parquet"
    assert (
        _play(
            tiny_model_dir,
            words_file,
            again,
            "--opponent",
            str(tiny_model_dir),
            "--model-name",
            "m1",
            "--opponent-name",
            "base",
            "--epoch",
            "1",
            "--seed",
            "99",
        )
        != 1
    )
    hist = pq.read_table(again).column("history").to_pylist()
    assert hist == [r["history"] for r in rows]  # greedy: the seed does not matter


def test_evaluation_in_shards_merges_to_the_same_games(tiny_model_dir, tmp_path):
    """Evaluation games played in two shards and merged are the games of one job, word
    for word and role for role, and give the same table."""
    words = write_words(tmp_path / "w.txt", WORDS)
    flags = ["--opponent", str(tiny_model_dir), "--model-name", "m1", "--epoch", "1"]
    whole = tmp_path / "whole.parquet"
    assert _play(tiny_model_dir, words, whole, *flags) == 0
    shards = [tmp_path / f"shard_{i:03d}.parquet" for i in range(2)]
    for i, out in enumerate(shards):
        assert _play(tiny_model_dir, words, out, *flags, "--shard-index", str(i),
                     "--num-shards", "2") == 0  # fmt: skip
    merged = tmp_path / "games.parquet"
    argv = ["merge-episodes", "--inputs", *map(str, shards), "--output", str(merged)]
    assert main(argv) == 0

    def games(path):
        rows = pq.read_table(path).to_pylist()
        return {(r["target_word"], r["policy_role"]): r["history"] for r in rows}

    assert len(games(merged)) == 2 * len(WORDS)
    assert games(merged) == games(whole)
    tables = []
    for path in (whole, merged):
        out = path.with_suffix(".tsv")
        assert main(["eval-games", "--episodes", str(path), "--output", str(out)]) == 0
        tables.append(out.read_text())
    assert tables[0] == tables[1]


def test_sampled_evaluation_games_to_the_paired_summary(tiny_model_dir, tmp_path):
    """Sampled evaluation games (rules eval_play_sampled ... sampled_games_table): k games
    per word and role, each its own draw, in shards that merge to the games of one job,
    then tables and the summary paired with M0 game k by game k."""
    words = write_words(tmp_path / "w.txt", WORDS)
    sampled = ["--opponent", str(tiny_model_dir), "--no-greedy", "--temperature", "1.0",
               "--games-per-word", "3", "--max-new-tokens", "6"]  # fmt: skip
    games = {}
    for name, epoch in (("imitation", "0"), ("epoch1", "1")):
        shards = [tmp_path / f"{name}_{i:03d}.parquet" for i in range(2)]
        for i, out in enumerate(shards):
            assert _play(tiny_model_dir, words, out, *sampled, "--model-name", name,
                         f"--epoch={epoch}", "--shard-index", str(i), "--num-shards", "2") == 0  # fmt: skip
        games[name] = tmp_path / f"{name}.parquet"
        merge = ["merge-episodes", "--inputs", *map(str, shards), "--output", str(games[name])]
        assert main(merge) == 0
    rows = pq.read_table(games["imitation"]).to_pylist()
    assert len(rows) == 3 * 2 * len(WORDS)
    ids = [r["episode_id"] for r in rows]
    assert len(set(ids)) == len(ids) and all(i.rsplit("-", 1)[1] in "012" for i in ids)
    # Each of a word's games is its own draw.
    by_key: dict = {}
    for r in rows:
        by_key.setdefault((r["target_word"], r["policy_role"]), []).append(r["history"])
    assert any(len({str(h) for h in histories}) > 1 for histories in by_key.values())
    tables = []
    for path in games.values():
        tables.append(path.with_suffix(".tsv"))
        assert main(["eval-games", "--episodes", str(path), "--output", str(tables[-1])]) == 0
    summary = tmp_path / "eval_sampled.tsv"
    argv = ["summarize-run", "--eval-games", *map(str, tables), "--eval-games-output",
            str(summary), "--eval-episodes", *map(str, games.values())]  # fmt: skip
    assert main(argv) == 0
    import pandas as pd

    table = pd.read_csv(summary, sep="\t")
    paired = table[(table["model"] == "epoch1") & (table["role"] == "all")].iloc[0]
    assert paired["reference"] == "imitation" and paired["pairs"] == 3 * 2 * len(WORDS)
    assert paired["win_diff_lo"] <= paired["win_diff"] <= paired["win_diff_hi"]
    assert 0 <= paired["win_diff_p"] <= 1
    reference = table[table["model"] == "imitation"]
    assert len(reference) == 3 and reference["pairs"].isna().all()
    counts = table[(table["model"] == "epoch1") & (table["role"] == "attacker")].iloc[0]
    assert counts["games"] == 3 * len(WORDS)


def test_bad_inputs_are_clear_errors(tiny_model_dir, words_file, tmp_path, capsys):
    out = tmp_path / "x.parquet"
    assert _play(tiny_model_dir, words_file, out, "--shard-index", "4", "--num-shards", "4") == 2
    assert "--shard-index 4 is out of range" in capsys.readouterr().err
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in tiny_model_dir.iterdir():  # by hand: no tokenizer, no manifest
        if not f.name.startswith(("tokenizer", "spag_manifest")):
            (bare / f.name).write_bytes(f.read_bytes())
    assert _play(bare, words_file, out) == 2
    assert "no tokenizer" in capsys.readouterr().err
    blank = tmp_path / "blank.txt"
    blank.write_text("apple\n\nriver\n", encoding="utf-8")
    assert _play(tiny_model_dir, blank, out) == 2
    err = capsys.readouterr().err
    assert str(blank) in err
    odd = tmp_path / "odd.txt"
    odd.write_text("apple\nri;ver\n", encoding="utf-8")
    assert _play(tiny_model_dir, odd, out) == 2
    assert not out.exists()


def test_test_fault_plugin_fails_the_named_shard(tiny_model_dir, words_file, tmp_path):
    # The shard-failure tests' fault comes from tests/faults, not from the package.
    env = dict(os.environ, **failing_shards_env(3, 1))
    spag = [sys.executable, "-m", "spag", "play", "--model", str(tiny_model_dir)]
    spag += ["--words", str(words_file), "--num-shards", "2", "--max-new-tokens", "4"]
    out = tmp_path / "shard_001.parquet"
    res = subprocess.run(
        [*spag, "--shard-index", "1", "--output", str(out)], env=env, capture_output=True, text=True
    )
    assert res.returncode == 3 and not out.exists()
    assert "fails on purpose" in res.stderr
    ok = tmp_path / "shard_000.parquet"
    res = subprocess.run([*spag, "--shard-index", "0", "--output", str(ok)], env=env)
    assert res.returncode == 0 and ok.exists()


def test_failure_while_writing_leaves_no_file(tiny_model_dir, words_file, tmp_path, monkeypatch):
    import pyarrow.parquet

    def broken(table, where, *a, **kw):
        Path(where).write_bytes(b"PAR1 half")
        raise KeyboardInterrupt

    monkeypatch.setattr(pyarrow.parquet, "write_table", broken)
    out = tmp_path / "shard.parquet"
    with pytest.raises(KeyboardInterrupt):
        _play(tiny_model_dir, words_file, out)
    # no shard, no half-written file; the journal of finished games stays for the rerun
    assert {p.name for p in tmp_path.iterdir()} == {words_file.name, f".{out.name}.journal.jsonl"}


def test_killed_play_leaves_no_output(tiny_model_dir, tmp_path):
    words = write_words(
        tmp_path / "many.txt", [w + s for w in WORDS for s in ("", "s", "x", "y", "z")]
    )
    out = tmp_path / "out" / "shard_000.parquet"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = child_command(
        [
            "play",
            "--model",
            str(tiny_model_dir),
            "--words",
            str(words),
            "--output",
            str(out),
            "--max-turns",
            "5",
            "--max-new-tokens",
            "200",
            "--batch-size",
            "8",
        ]
    )
    proc = subprocess.Popen(
        cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True
    )
    try:
        deadline = time.monotonic() + 120
        started = False
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            if "message 1/10 (attacker)" in line:
                started = True
                break
        assert started, "spag play never reached its first message"
        assert proc.poll() is None, "spag play finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    leftovers = list(out.parent.glob("*.parquet")) if out.parent.exists() else []
    assert leftovers == []


def test_a_journal_key_survives_an_upgrade_that_adds_a_flag_at_its_default(
    tiny_model_dir, words_file, tmp_path
):
    """A killed shard resumes from its journal after an upgrade that adds a flag: the
    key leaves out flags at their defaults, and an older parser had no such flag."""
    import argparse

    from spag.commands import play
    from spag.ops.journal import play_journal_key as key

    parser = argparse.ArgumentParser()
    play.add_arguments(parser)
    line = ["--model", str(tiny_model_dir), "--words", str(words_file)]
    line += ["--output", str(tmp_path / "shard.parquet"), "--max-new-tokens", "6"]
    words = ["apple"]
    now = parser.parse_args(line)
    before = argparse.Namespace(**vars(now))
    del before.min_new_tokens  # a flag the earlier parser did not have
    assert key(now, words) == key(before, words)
    # A flag away from its default is the shard's setting: another key.
    changed = parser.parse_args([*line, "--min-new-tokens", "1"])
    assert key(changed, words) != key(now, words)
    assert key(parser.parse_args([*line, "--max-new-tokens", "7"]), words) != key(now, words)
