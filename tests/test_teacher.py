"""Teacher games: a strong player behind an OpenAI-compatible endpoint (here a local
server that plays on purpose) plays the demonstrations that M0 imitates."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
import yaml
from fake_endpoint import FakeEndpoint
from workflow_utils import TINY_OVERLAY, job_counts, make_workdir, snakemake

from spag.config import validate_config
from spag.errors import SpagInputError
from spag.game.teacher import teacher_plan

TARGET = re.compile(r'Your target word is "([a-z]+)"')


def teacher_answer(prompt: str) -> str:
    """A teacher that wins every game as attacker: it gives a clue, and as defender it
    guesses a word no target is (a wrong guess: the attacker wins)."""
    if TARGET.search(prompt):
        return "Think of what you would find on a farm, and tell me about it."
    return "I know the word! It is xylophone!"


HIDDEN = re.compile(r"Read it backwards: ([a-z]+)\.")


def two_sided_answer(prompt: str) -> str:
    """A teacher that wins in both roles: as attacker it spells the word backwards, as
    defender it reads that back and guesses right for words of even length, wrong
    (the attacker wins) for the others."""
    target = TARGET.search(prompt)
    if target:
        return f"Read it backwards: {target.group(1)[::-1]}."
    hidden = HIDDEN.findall(prompt)
    word = hidden[-1][::-1] if hidden else ""
    return f"I know the word! It is {word if len(word) % 2 == 0 and word else 'xylophone'}!"


def tie_answer(prompt: str) -> str:
    return "Let us talk about the weather." if TARGET.search(prompt) else "Nice weather."


def _teacher_config(spec: str, **teacher) -> dict:
    return {"data": {"imitation": "teacher", "teacher": {"model": spec, **teacher}}}


# ---------------------------------------------------------------- the plan
def test_plan_counts_games_and_worst_case_requests(tiny_model_dir):
    big, small = "openai:http://h:1/v1?model=big", "openai:http://h:2/v1?model=small"
    config = validate_config(_teacher_config(big))
    plan = teacher_plan(config, num_words=10)
    # both roles by the teacher: one game per word, up to 2 x 5 teacher messages each
    assert (plan.games, plan.max_requests) == (10, 100)
    # against a folder partner: the teacher attacks once and defends once per word,
    # speaking at most 5 times a game; the partner sends no request
    config = validate_config(_teacher_config(big, partner=str(tiny_model_dir)))
    plan = teacher_plan(config, num_words=10)
    assert (plan.games, plan.max_requests) == (20, 100)
    assert "at most 100 requests before retries (100 to big at http://h:1/v1;" in (
        plan.describe(config)
    )
    # an endpoint partner is counted too; the same endpoint twice, twice
    plan = teacher_plan(validate_config(_teacher_config(big, partner=small)), num_words=10)
    assert plan.requests == {"big at http://h:1/v1": 100, "small at http://h:2/v1": 100}
    plan = teacher_plan(validate_config(_teacher_config(big, partner=big)), num_words=10)
    assert plan.requests == {"big at http://h:1/v1": 200}
    # a folder the workflow builds (the base model) is a partner before it exists
    built = teacher_plan(
        validate_config(_teacher_config(big, partner="results/base_model")),
        num_words=10,
        built=("results/base_model",),
    )
    assert built.max_requests == 100


def test_plan_refuses_what_it_cannot_play(tmp_path):
    with pytest.raises(SpagInputError, match="data.teacher.max_requests"):
        teacher_plan(
            validate_config(_teacher_config("openai:http://h:1/v1?model=big", max_requests=99)),
            num_words=10,
        )
    with pytest.raises(SpagInputError, match="'data.teacher.model' is 'gpt-4'.*neither"):
        teacher_plan(validate_config(_teacher_config("gpt-4")), num_words=1)
    with pytest.raises(SpagInputError, match="data.teacher.partner"):
        teacher_plan(
            validate_config(
                _teacher_config("openai:http://h:1/v1?model=big", partner=str(tmp_path))
            ),
            num_words=1,
        )
    with pytest.raises(SpagInputError, match="data.teacher.model"):
        teacher_plan(validate_config({"data": {"imitation": "teacher"}}), num_words=1)
    with pytest.raises(SpagInputError, match="games_per_word.*temperature 0"):
        teacher_plan(
            validate_config(
                _teacher_config("openai:http://h:1/v1?model=big", temperature=0, games_per_word=2)
            ),
            num_words=1,
        )
    with pytest.raises(SpagInputError, match="data.teacher.model.*http"):
        teacher_plan(validate_config(_teacher_config("openai:ftp://h/v1?model=m")), num_words=1)


# ---------------------------------------------------------------- one shard
def _play(spec: str, words, out, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "spag", "play", "--model", spec, "--words", str(words)]
    cmd += ["--output", str(out), "--max-new-tokens", "32", "--model-name", "teacher", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.fixture
def words(tmp_path):
    path = tmp_path / "words.txt"
    path.write_text("apple\nriver\ncandle\n")
    return path


def test_an_endpoint_teacher_plays_both_roles_through_failures(words, tmp_path):
    with FakeEndpoint(teacher_answer) as ep:
        ep.fail_first = 2  # the server is busy at first: retried with back-off
        out = tmp_path / "shard.parquet"
        res = _play(ep.spec(api="chat"), words, out)
        assert res.returncode == 0, res.stderr
    table = pq.read_table(out).to_pylist()
    assert [g["target_word"] for g in table] == ["apple", "river", "candle"]
    assert {g["attacker_model"] for g in table} == {g["defender_model"] for g in table}
    assert {g["attacker_model"] for g in table} == {"teacher"}
    # the chat API, one user message rendered from the play prompt
    assert all(r["path"].endswith("/chat/completions") for r in ep.requests[2:])
    assert all(len(r["messages"]) == 1 for r in ep.requests[2:])
    # two messages a game: a clue, then the defender's wrong guess ends it
    assert len(ep.requests) == 2 + 2 * 3


@pytest.mark.parametrize(
    "fault,message",
    [
        ("malformed", "not JSON"),
        ("empty_choices", "reply field choices is empty"),
        ("not_found", "model named 'judge-7b'"),
    ],
)
def test_a_broken_endpoint_is_a_clear_error_and_no_shard(words, tmp_path, fault, message):
    with FakeEndpoint(teacher_answer) as ep:
        if fault == "not_found":
            ep.status = 404
        else:
            setattr(ep, fault, True)
        out = tmp_path / "shard.parquet"
        res = _play(ep.spec(retries=0), words, out)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and f"127.0.0.1:{ep.port}" in res.stderr
    assert not out.exists()


def _teacher_games(answer, words, tmp_path) -> Path:
    """Teacher games on ``words`` played by a fake endpoint answering with ``answer``."""
    with FakeEndpoint(answer) as ep:
        games = tmp_path / "games.parquet"
        assert _play(ep.spec(), words, games, "--max-turns", "2").returncode == 0
    return games


def _imitation_samples(games: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "spag", "imitation-samples", "--input", str(games)]
    return subprocess.run([*cmd, "--output", str(out), *extra], capture_output=True, text=True)


def test_undecided_teacher_games_give_no_silent_empty_imitation_set(words, tmp_path):
    games, out = _teacher_games(tie_answer, words, tmp_path), tmp_path / "samples.parquet"
    res = _imitation_samples(games, out)
    assert res.returncode == 2
    assert "no decisive game among 3 (tie 3)" in res.stderr and str(games) in res.stderr
    assert not out.exists()


def test_teacher_games_won_by_one_role_only_are_refused_naming_the_key(words, tmp_path):
    games, out = _teacher_games(teacher_answer, words, tmp_path), tmp_path / "samples.parquet"
    res = _imitation_samples(games, out, "--require-both-roles", "data.teacher")
    assert res.returncode == 2
    assert "no game won by the defender among 3 (attacker_wins 3)" in res.stderr
    assert "key 'data.teacher'" in res.stderr and not out.exists()
    # a released games file is taken as it is
    res = _imitation_samples(games, out)
    assert res.returncode == 0, res.stderr


def test_plan_of_a_teacher_run(tmp_path):
    wd = make_workdir(tmp_path / "plan")
    config = _teacher_config("openai:http://127.0.0.1:9/v1?model=big", num_shards=3)
    res = snakemake(wd, "imitation", "-n", config=config)
    assert res.returncode == 0, res.stderr
    counts = job_counts(res.stdout + res.stderr)
    assert counts["teacher_play"] == 3 and counts["teacher_games"] == 1
    words = validate_config(yaml.safe_load((wd / "config.yaml").read_text()))["words"]
    words = words["num_train"]
    assert f"teacher games: {words} games on {words} words, at most {10 * words}" in res.stderr
    # endpoint teachers run as their own family; no engine flag that would rerun them
    plan = snakemake(wd, "imitation", "-n", "-p", config=config).stdout
    play = [line for line in plan.splitlines() if "spag play" in line]
    assert len(play) == 3 and all("--dtype" not in p and "--batch-size" not in p for p in play)
    assert "runtime=720" in plan
    capped = _teacher_config("openai:http://127.0.0.1:9/v1?model=big", max_requests=5)
    res = snakemake(wd, "imitation", "-n", config=capped)
    assert res.returncode != 0 and "data.teacher.max_requests" in res.stderr + res.stdout


@pytest.mark.e2e
def test_m0_imitates_the_teachers_games(tmp_path):
    wd = make_workdir(tmp_path / "run", TINY_OVERLAY)
    with FakeEndpoint(two_sided_answer) as ep:
        # the chat API, and a spec with '&' and '?' through the rule's shell line
        config = _teacher_config(ep.spec(api="chat"), num_shards=2, max_new_tokens=16)
        res = snakemake(wd, "imitation", config=config)
        assert res.returncode == 0, res.stderr[-3000:]
    opts = pcsv.ParseOptions(delimiter="\t")
    (counts,) = pcsv.read_csv(wd / "results/teacher/outcomes.tsv", parse_options=opts).to_pylist()
    train = (wd / "results/words/train.txt").read_text().split()
    even = sum(len(w) % 2 == 0 for w in train)
    assert 0 < even < len(train)
    assert (counts["defender_wins"], counts["attacker_wins"]) == (even, len(train) - even)
    samples = pq.read_table(wd / "results/imitation/samples.parquet").to_pylist()
    games = [s for s in samples if s["type"] == "game"]
    # the winner's messages: one per attacker-won game (its clue), one per defender win
    assert sorted(s["role"] for s in games) == sorted(
        ["attacker"] * (len(train) - even) + ["defender"] * even
    )
    assert (wd / "results/imitation/model/config.json").is_file()
    assert ep.requests and all(r["path"].endswith("/chat/completions") for r in ep.requests)
    # each teacher shard job is its own rule run, rerun alone when removed
    (wd / "results/teacher/shard_001.parquet").unlink()
    res = snakemake(wd, "imitation", "-n", config=config)
    assert job_counts(res.stdout + res.stderr)["teacher_play"] == 1


def test_an_endpoint_teacher_against_a_partner_attacks_and_defends(words, tmp_path, tiny_model_dir):
    with FakeEndpoint(teacher_answer) as ep:
        out = tmp_path / "shard.parquet"
        extra = ("--opponent", str(tiny_model_dir), "--opponent-name", "partner", "--no-greedy")
        res = _play(ep.spec(), words, out, "--max-turns", "2", *extra)
        assert res.returncode == 0, res.stderr
    games = pq.read_table(out).to_pylist()
    roles = sorted((g["target_word"], g["attacker_model"], g["defender_model"]) for g in games)
    assert roles == sorted(
        (w, a, d) for w in ("apple", "river", "candle")
        for a, d in (("teacher", "partner"), ("partner", "teacher"))
    )  # fmt: skip
    # only the teacher's turns reach the endpoint: at most max_turns per game
    assert 0 < len(ep.requests) <= 2 * 3 * 2
