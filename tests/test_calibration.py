"""The calibration (``snakemake calibrate``, spag.ops.calibration) and the times read from
it and from a run's own jobs (spag.ops.timing, ``spag estimate``, ``spag status``).

The figures are checked against values worked out by hand from hand-made logs; the
calibration itself runs for real on a copy of the session's tiny run (``tiny_run``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from workflow_utils import REPO, copy_run, job_counts, snakemake

from spag.config import read_config_files, validate_config
from spag.errors import SpagInputError
from spag.ops.calibration import (
    calibration_games,
    calibration_shards,
    cost_bound,
    score_figures,
    selfplay_figures,
    train_figures,
)
from spag.ops.timing import PlannedJob, format_times, parse_dry_run, rule_times


def _config(**sections) -> dict:
    config, _ = read_config_files([REPO / "config.yaml"])
    for key, value in sections.items():
        config.setdefault(key, {}).update(value)
    return validate_config(config)


def test_the_calibration_plays_one_engine_batch_of_a_shard():
    config = _config(selfplay={"num_shards": 3, "batch_size": 64})
    # 48 words in 3 shards: 16 games a shard, fewer than a batch: the shard's 16.
    assert calibration_games(config, 48) == 16
    assert calibration_shards(config, 48) == 3  # shard 0 of 3 holds them
    config = _config(selfplay={"num_shards": 1, "batch_size": 8, "games_per_secret": 2})
    assert calibration_games(config, 48) == 8  # one batch of 8 games: 4 words
    assert calibration_shards(config, 48) == 12  # shard 0 of 12 holds 4 words
    config = _config(calibration={"games": 5})
    assert calibration_games(config, 48) == 5


def test_its_cost_is_bounded_by_its_time_limit():
    config = _config(calibration={"minutes": 20})
    text = cost_bound(config, {"selfplay": 1, "score": 1, "train_imitation": 8, "train_spag": 8})
    assert "4 jobs, each stopped after 20 min" in text
    assert "train_spag: 8 GPU(s) x 20 min" in text
    assert "at most 6.00 GPU-hours and 80 job-minutes" in text  # (1 + 1 + 8 + 8) x 20 / 60
    text = cost_bound(config, {"selfplay": 0, "score": 0, "train_imitation": 0, "train_spag": 0})
    assert "selfplay: CPU (" in text and "at most 0.00 GPU-hours" in text


def _bench(path: Path, seconds: float) -> Path:
    path.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:00\t1.0\n")
    return path


def test_figures_from_the_jobs_logs(tmp_path):
    log = tmp_path / "score.log"
    log.write_text("loading\nscoring took 4.00 s for 8000 tokens of 100 samples\n")
    f = score_figures(log, _bench(tmp_path / "s.tsv", 10.0))
    assert f["tokens_per_s"] == 2000 and f["fixed_seconds"] == 6.0 and f["samples"] == 100

    log = tmp_path / "train.log"
    log.write_text("trained 6 steps in 12.50 s: 6000 tokens, peak memory 3.25 GiB\n")
    loss = tmp_path / "loss_log.tsv"
    rows = ["step\ttokens_per_s"] + [f"{s}\t{r}" for s, r in [(1, 100), (2, 500), (3, 600),
                                                             (4, 700)]]  # fmt: skip
    loss.write_text("\n".join(rows) + "\n")
    f = train_figures(log, loss, _bench(tmp_path / "t.tsv", 30.0))
    # Steady rate: the median of steps 2-4 (step 1 builds); the rest of the wall is fixed.
    assert f["tokens_per_s"] == 600 and f["fixed_seconds"] == pytest.approx(30 - 6000 / 600)
    assert f["peak_gib"] == 3.25 and f["step_seconds"] == pytest.approx(12.5 / 6)

    episodes = tmp_path / "episodes.parquet"
    pq.write_table(
        pa.table(
            {
                "history": [
                    [{"role": "a", "content": "x"}] * 4,
                    [{"role": "a", "content": "y"}] * 2,
                ],
                "message_tokens": [[3, 5, 7, 9], [2, 4]],
                "end_reason": ["guess", "max_turns"],
            }
        ),
        episodes,
    )
    log = tmp_path / "play.log"
    log.write_text(
        "policy model: 900 prompt tokens, 300 run through it (the rest from kept keys/values)\n"
        "wrote x.parquet: 2 episodes, 30 generated tokens in 3.0 s (10 tokens/s)\n"
    )
    f = selfplay_figures(episodes, log, _bench(tmp_path / "p.tsv", 5.0))
    assert f["messages_per_game"] == 3 and f["reply_tokens"] == 5  # 30 tokens, 6 replies
    assert f["tokens_per_s"] == 10 and f["fixed_seconds"] == 2.0
    assert (f["games_finished"], f["prompt_tokens_seen"], f["prompt_tokens_computed"]) == (
        1,
        900,
        300,
    )
    with pytest.raises(SpagInputError, match="no line matching"):
        score_figures(tmp_path / "play.log", tmp_path / "s.tsv")


def test_a_dry_run_is_read_job_by_job():
    text = """Job stats:
job      count
-------  -----
selfplay     2

[Mon Dec  7 20:14:30 2026]
rule selfplay:
    input: results/base_model
    output: results/epoch1/selfplay/shard_000.parquet
    jobid: 3
    benchmark: results/benchmarks/epoch1/selfplay/shard_000.tsv
    wildcards: epoch=1, shard=000
    resources: tmpdir=/tmp, runtime=15

[Mon Dec  7 20:14:30 2026]
localrule merge_episodes:
    output: results/epoch1/episodes.parquet
    wildcards: epoch=1
"""
    jobs = parse_dry_run(text)
    assert [(j.rule, j.wildcards, j.benchmark, j.local) for j in jobs] == [
        ("selfplay", "epoch=1, shard=000", "results/benchmarks/epoch1/selfplay/shard_000.tsv", False),
        ("merge_episodes", "epoch=1", None, True),
    ]  # fmt: skip


def _calibration(folder: Path) -> None:
    folder.mkdir(parents=True)
    docs = {
        "selfplay": {"tokens_per_s": 100.0, "fixed_seconds": 20.0, "messages_per_game": 4.0,
                     "reply_tokens": 5.0, "games": 16},
        "score": {"tokens_per_s": 1000.0, "fixed_seconds": 10.0, "tokens": 5000, "samples": 50},
        "train_spag": {"tokens_per_s": 200.0, "fixed_seconds": 30.0},
    }  # fmt: skip
    for family, figures in docs.items():
        doc = {"family": family, "figures": figures, "measured": {"hostname": "node1"}}
        (folder / f"{family}.json").write_text(json.dumps(doc))


def test_a_job_is_timed_from_the_best_figure_there_is(tmp_path):
    config = _config(
        words={"num_train": 48}, selfplay={"num_shards": 3}, rewards={"scheme": "winners"}
    )
    _calibration(tmp_path / "results" / "calibration")
    jobs = [
        PlannedJob("target_words", "", None, True, pending=False, seconds=4.0),
        PlannedJob("merge_episodes", "epoch=1", None, True, pending=False, seconds=6.0),
        PlannedJob("merge_episodes", "epoch=2", None, True),
        PlannedJob("assign_rewards", "epoch=2", None, True),
        PlannedJob("selfplay", "epoch=1, shard=000", None, False, pending=False, seconds=50.0),
        PlannedJob("selfplay", "epoch=2, shard=000", None, False),
        PlannedJob("score_ref", "epoch=2", None, False),
        PlannedJob("train_spag", "epoch=2", None, False),
        PlannedJob("eval_reasoning", "model=epoch2", None, False),
    ]
    times, shape = rule_times(jobs, config, tmp_path)
    by = {t.rule: t for t in times}
    assert (shape.messages, shape.reply_tokens) == (4.0, 5.0)  # the calibration's games
    assert by["selfplay"].per_job == 50.0 and "finished job(s)" in by["selfplay"].source
    assert by["merge_episodes"].per_job == 6.0  # its own finished job
    assert by["assign_rewards"].per_job == 5.0  # none yet: a light step, the mean of 4 and 6
    # 48 games x 4 messages x 1/2 (winners) = 96 samples of 100 + 5 x 4 / 2 tokens.
    assert by["score_ref"].per_job == pytest.approx(10 + 96 * 110 / 1000)
    epochs = config["spag"]["num_train_epochs"]
    assert by["train_spag"].per_job == pytest.approx(30 + 96 * 110 * epochs / 200)
    assert by["eval_reasoning"].per_job is None
    text = format_times(times, shape, 1, "t:")
    assert "no figure for eval_reasoning (1)" in text
    assert "at most 10 of 24" in text  # the config's caps beside the measured shape


def test_missing_models_are_refused_naming_the_flag(tmp_path, capsys):
    from spag.cli import main
    from spag.ops.estimate import card_name

    missing = tmp_path / "results" / "base_model"
    assert main(["training-memory", "--model", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--model {missing}: no such folder or file" in err and "Traceback" not in err
    missing.mkdir(parents=True)
    assert main(["training-memory", "--model", str(missing)]) == 2
    assert "the folder has no config.json" in capsys.readouterr().err
    # A card by the name nvidia-smi prints.
    assert card_name("NVIDIA H100 80GB HBM3") == "H100-80GB"
    assert card_name("NVIDIA A100-SXM4-40GB") == "A100-40GB"
    assert card_name("H200") == "H200"
    with pytest.raises(SpagInputError, match="40 or 80 GB"):
        card_name("A100")


# ---------------------------------------------------------------- a real calibration
@pytest.fixture(scope="module")
def calibrated(tiny_run, tmp_path_factory):
    run = copy_run(tiny_run, tmp_path_factory.mktemp("calibrated") / "run")
    res = snakemake(run, "calibrate", "--cores", "2", timeout=900)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    return run, res


def test_calibration_runs_the_real_rules_on_the_runs_own_inputs(calibrated):
    run, res = calibrated
    counts = job_counts(res.stdout + res.stderr)
    # The run's first jobs (base model, words, imitation samples) were done: not rerun.
    assert set(counts) == {
        "calibration_plan", "calibrate_selfplay", "calibration_samples", "calibrate_score",
        "calibrate_train_imitation", "calibrate_train_spag", "calibrate",
    }  # fmt: skip
    out = res.stdout + res.stderr
    # The bound is printed before any calibration job starts.
    assert out.index("at most") < out.index("rule calibrate_selfplay")
    cal = run / "results" / "calibration"
    for family in ("selfplay", "score", "train_imitation", "train_spag"):
        doc = json.loads((cal / f"{family}.json").read_text())
        f = doc["figures"]
        assert f["tokens_per_s"] > 0 and f["fixed_seconds"] >= 0, family
        assert doc["measured"]["hostname"] and doc["measured"]["packages"]["torch"]
        assert doc["measured"]["started"]
    sp = json.loads((cal / "selfplay.json").read_text())["figures"]
    assert sp["games"] == 4  # 8 words in 2 shards: a shard's 4 games, under a batch of 16
    assert 1 <= sp["messages_per_game"] <= 6 and 0 < sp["reply_tokens"] <= 8
    train = json.loads((cal / "train_spag.json").read_text())
    assert train["figures"]["steps"] == 6 and train["figures"]["peak_gib"] > 0
    assert "calibration (measured on the run's own machines):" in out
    # The calibration's models are temporary; a second calibrate plans nothing.
    assert not (cal / "train_spag" / "model").exists()
    again = snakemake(run, "-n", "calibrate")
    assert "Nothing to be done" in again.stdout + again.stderr


def _spag(run: Path, *args: str) -> subprocess.CompletedProcess:
    spag = Path(sys.executable).with_name("spag")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return subprocess.run([str(spag), *args], cwd=run, capture_output=True, text=True,
                          timeout=300, env=env)  # fmt: skip


def test_estimate_and_status_time_the_next_epoch_from_the_runs_own_jobs(calibrated):
    run, _ = calibrated
    (run / "two.yaml").write_text(yaml.safe_dump({"epochs": 2}))
    files = ["--configfile", "config.yaml", "overlay.yaml", "two.yaml"]
    proc = _spag(run, "estimate", *files, "--target", "spag_epoch2")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "spag_epoch2, from measured figures:" in out
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("  ") and ln.split()}
    # Epoch 1 is done: epoch 2's two shards are timed from epoch 1's.
    assert lines["selfplay"].split()[1:2] == ["2"] and lines["selfplay"].split()[3] == "2"
    assert "the run's 2 finished job(s) of this rule" in out
    assert "target:" in out and "of job time left" in out
    status = _spag(run, "status", *files)
    assert status.returncode == 0, status.stderr
    assert "times of spag_epoch2:" in status.stdout and "target:" in status.stdout


def test_before_any_job_of_a_rule_the_calibration_times_it(calibrated):
    """Every job of the target taken as still to run: the GPU rules timed from the
    calibration's figures, the light steps have no figure."""
    from spag.ops.timing import snakemake_plan

    run, _ = calibrated
    files = ["config.yaml", "overlay.yaml"]
    config, given = read_config_files([run / f for f in files])
    config = validate_config(config, given=given)
    jobs = snakemake_plan("spag_epoch1", run, files)
    for j in jobs:
        j.pending, j.seconds = True, None
    times, shape = rule_times(jobs, config, run)
    by = {t.rule: t for t in times}
    assert shape.source.startswith("epoch 1's 8 games")  # the latest episodes before it
    for rule, family in [("selfplay", "selfplay"), ("score_ref", "score"),
                         ("train_spag", "train_spag"), ("train_imitation", "train_imitation")]:  # fmt: skip
        assert by[rule].per_job and f"results/calibration/{family}.json" in by[rule].source
    assert by["merge_episodes"].per_job is None


def test_the_executors_own_time_a_job_is_read_from_the_snakemake_logs(tmp_path):
    from spag.ops.timing import executor_overheads

    log = tmp_path / ".snakemake" / "log" / "2026-12-07T212536.snakemake.log"
    log.parent.mkdir(parents=True)
    bench = tmp_path / "results" / "benchmarks"
    bench.mkdir(parents=True)
    _bench(bench / "a.tsv", 10.0)
    _bench(bench / "b.tsv", 2.5)
    log.write_text(
        "[Mon Dec  7 21:25:37 2026]\nrule selfplay:\n    jobid: 3\n"
        "    benchmark: results/benchmarks/a.tsv\n"
        "[Mon Dec  7 21:25:37 2026]\nlocalrule merge_episodes:\n    jobid: 4\n"
        "    benchmark: results/benchmarks/b.tsv\n"
        "[Mon Dec  7 21:25:40 2026]\nFinished jobid: 4 (Rule: merge_episodes)\n"
        "[Mon Dec  7 21:25:59 2026]\nFinished jobid: 3 (Rule: selfplay)\n"
    )
    # selfplay: seen 22 s, its command 10 s; merge_episodes: 3 s against 2.5 s.
    assert executor_overheads(tmp_path) == {False: [12.0], True: [0.5]}
