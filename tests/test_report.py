"""The Snakemake report of a tiny run: every plot is in it, and a browser can render it.

The session's shared tiny run of the whole workflow (1 epoch, 2 shards; conftest's
``tiny_run``) builds the summary tables and plots; ``snakemake --report report.html``
collects them; headless Chromium opens the report and takes a screenshot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from workflow_utils import TINY_OVERLAY, copy_run, job_counts, snakemake

from spag.report.names import EPOCH_PLOTS, RUN_PLOTS

pytestmark = pytest.mark.e2e

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def _screenshot(browser: str, html: Path, png: Path, profile: Path) -> subprocess.CompletedProcess:
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        f"--screenshot={png}",
        "--window-size=1400,1000",
        "--virtual-time-budget=5000",
        html.resolve().as_uri(),
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=180, env=dict(os.environ, HOME=str(profile))
    )


def test_run_builds_tables_and_plots(tiny_run):
    plots = tiny_run / "results" / "plots"
    for name in RUN_PLOTS:
        assert (plots / name).read_bytes()[:8] == PNG_MAGIC, name
    for name in EPOCH_PLOTS:
        assert (plots / "epoch1" / name).read_bytes()[:8] == PNG_MAGIC, name
    epochs = pd.read_csv(tiny_run / "results" / "summary" / "epochs.tsv", sep="\t")
    assert epochs["epoch"].tolist() == [1]
    assert epochs.loc[0, "selfplay_games"] == TINY_OVERLAY["words"]["num_train"]
    assert epochs.loc[0, "eval_games"] == 2 * TINY_OVERLAY["words"]["num_test"]
    assert 0 <= epochs.loc[0, "reasoning_spag_tiny_reasoning"] <= 1
    reasoning = pd.read_csv(tiny_run / "results" / "summary" / "reasoning.tsv", sep="\t")
    assert reasoning["model"].drop_duplicates().tolist() == ["base", "imitation", "epoch1"]
    # The base model and M0 played the same games against the same opponent as M1.
    games = pd.read_csv(tiny_run / "results" / "summary" / "eval_games.tsv", sep="\t")
    assert games["model"].drop_duplicates().tolist() == ["base", "imitation", "epoch1"]
    both = games[games["role"] == "all"]
    assert (both["games"] == 2 * TINY_OVERLAY["words"]["num_test"]).all()
    for rate in ("win_rate", "loss_rate", "tie_rate", "broke_rules_rate"):
        assert (games[f"{rate}_lo"] <= games[rate]).all(), rate
        assert (games[rate] <= games[f"{rate}_hi"]).all(), rate
    # M1 and the base model read against M0 pair by pair: the difference of the rates
    # over the same words, inside its interval; none on M0's own rows.
    paired = games[games["model"] != "imitation"]
    assert (paired["reference"] == "imitation").all() and paired["win_diff"].notna().all()
    m0 = games.set_index(["model", "role"]).loc["imitation"]
    for _, row in paired.iterrows():
        assert row["pairs"] == row["games"]
        diff = row["win_rate"] - m0.loc[row["role"], "win_rate"]
        assert row["win_diff"] == pytest.approx(diff)
        assert row["win_diff_lo"] <= row["win_diff"] <= row["win_diff_hi"]
        assert 0 <= row["win_diff_p"] <= 1
    assert games.loc[games["model"] == "imitation", "win_diff"].isna().all()
    assert 0 <= epochs.loc[0, "eval_win_rate_lo"] <= epochs.loc[0, "eval_win_rate_hi"] <= 1


def test_the_run_is_tracked_and_its_provenance_recorded(tiny_run):
    """TensorBoard files of every training stage and of the loop, read back; the job
    records and results/run_info.json; commit and config digest on the summary tables;
    `spag status` on the finished run."""
    import json
    import subprocess
    import sys

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from spag.config import validate_config
    from spag.ops.tracking import config_digest

    info = json.loads((tiny_run / "results" / "run_info.json").read_text())
    config = info["config"]
    assert info["config_digest"] == config_digest(validate_config(config))
    run_name = f"run-{info['config_digest']}"
    board = tiny_run / "results" / "tracking" / "tensorboard" / run_name
    for stage in ("imitation", "epoch1"):
        events = EventAccumulator(str(board / stage))
        events.Reload()
        assert {"train/loss", "train/kl"} <= set(events.Tags()["scalars"]), stage
    loop = EventAccumulator(str(board / "loop"))
    loop.Reload()
    assert [e.step for e in loop.Scalars("loop/decisive_frac")] == [1]

    steps = {j["step"] for j in info["jobs"]}
    assert {"play", "train", "merge-episodes", "score-ref", "eval-reasoning"} <= steps
    assert all(j["packages"]["transformers"] for j in info["jobs"] if j["step"] == "train")
    assert info["hosts"] and (info["git"] is None or len(info["git"]["commit"]) == 40)
    assert (tiny_run / "results" / "epoch1" / "model.job.json").is_file()
    shard = tiny_run / "results" / "epoch1" / "selfplay" / "shard_000.parquet.job.json"
    assert json.loads(shard.read_text())["step"] == "play"

    epochs = pd.read_csv(tiny_run / "results" / "summary" / "epochs.tsv", sep="\t", dtype=str)
    assert epochs["config_digest"].tolist() == [info["config_digest"]]
    assert epochs["commit"].notna().all()

    spag = Path(sys.executable).with_name("spag")
    status = subprocess.run(
        [str(spag), "status", "--configfile", "config.yaml", "overlay.yaml"],
        cwd=tiny_run, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert "epochs done: 1 of 1" in status.stdout and "shards 2/2 done" in status.stdout


def test_report_contains_every_plot_and_renders(tiny_run, tmp_path):
    run = copy_run(tiny_run, tmp_path / "run")
    res = snakemake(run, "--report", "report.html", timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    html_path = run / "report.html"
    html = html_path.read_text(encoding="utf-8", errors="replace")
    missing = [n for n in RUN_PLOTS if n not in html]
    missing += [f"epoch1/{n}" for n in EPOCH_PLOTS if f"epoch1/{n}" not in html]
    assert not missing, f"plots missing from the report: {missing}"
    for text in ("Epoch 1", "Adversarial Taboo", "epochs.tsv", "reasoning.tsv", "eval_games.tsv"):
        assert text in html, text

    browser = _browser()
    if browser is None:
        pytest.skip("no headless browser (install Debian's chromium) to render the report")
    png = tmp_path / "report.png"
    out = _screenshot(browser, html_path, png, tmp_path / "profile")
    assert png.is_file(), out.stderr[-3000:]
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert png.stat().st_size > 10_000  # a rendered page, not a blank one


def test_unknown_task_fails_only_its_jobs(tiny_run, tmp_path):
    """A misnamed lm-eval task: a clear error in each reasoning log, nothing else rebuilt."""
    tiny_run = copy_run(tiny_run, tmp_path / "run")
    model = tiny_run / "results" / "epoch1" / "model" / "model.safetensors"
    before = model.stat().st_mtime_ns
    bad = {"evaluation": {"reasoning": {"tasks": ["no_such_task"]}}}
    res = snakemake(tiny_run, "--keep-going", "--cores", "2", config=bad, timeout=900)
    assert res.returncode != 0
    for name in ("base", "imitation", "epoch1"):
        log = (tiny_run / "results" / "logs" / "eval" / f"reasoning_{name}.log").read_text()
        assert "unknown lm-eval task 'no_such_task'" in log, log[-2000:]
        assert "Traceback" not in log
        assert not (tiny_run / "results" / "eval" / "reasoning" / f"{name}.json").exists()
    assert model.stat().st_mtime_ns == before
    # Only the reasoning jobs and what reads their results were planned.
    planned = job_counts(res.stdout + res.stderr)
    assert planned["eval_reasoning"] == 3
    # run_info: the resolved config it records changed
    allowed = {"eval_reasoning", "epoch_summary", "summary_tables", "plots", "run_info", "all"}
    assert set(planned) <= allowed
