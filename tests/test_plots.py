"""Report plots (spag plot-run, spag plot-epoch): every file is written, with data or with a
'no data' note; the rules declare the same files; inputs come as LABEL=PATH."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_summarize import eval_games_tsv, make_epoch_files, reasoning_json, summarize_argv
from workflow_utils import REPO, make_workdir, snakemake

from spag.cli import main
from spag.errors import SpagInputError
from spag.game.taboo import TABOO
from spag.report.inputs import LabelledPaths, labelled_path
from spag.report.names import EPOCH_PLOTS, RUN_PLOTS
from spag.report.plots import benchmark_step, win_rate_table

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 2000


@pytest.fixture()
def run_tables(tmp_path):
    summaries, reasoning = [], []
    games = [
        eval_games_tsv(tmp_path / "eval" / "games" / f"{m}.tsv", m, e)
        for m, e in (("base", -1), ("imitation", 0))
    ]
    for e in (1, 2):
        files = make_epoch_files(tmp_path, e, {"task_a": 0.3 + 0.1 * e, "task_b": 0.7})
        out = tmp_path / f"epoch{e}" / "summary.tsv"
        assert main(summarize_argv(e, files, out, benchmarks=True)) == 0
        summaries.append(out)
        reasoning.append(files["reasoning"])
        games.append(files["eval_games"])
    reasoning.append(
        reasoning_json(
            tmp_path / "eval" / "reasoning" / "base.json", "base", {"task_a": 0.25, "task_b": 0.5}
        )
    )
    summary = tmp_path / "summary" / "epochs.tsv"
    long = tmp_path / "summary" / "reasoning.tsv"
    eval_games = tmp_path / "summary" / "eval_games.tsv"
    assert (
        main(
            [
                "summarize-run",
                "--epoch-summaries",
                *map(str, summaries),
                "--reasoning",
                *map(str, reasoning),
                "--output",
                str(summary),
                "--reasoning-output",
                str(long),
                "--eval-games",
                *map(str, games),
                "--eval-games-output",
                str(eval_games),
            ]
        )
        == 0
    )
    (tmp_path / "imitation").mkdir()
    (tmp_path / "imitation" / "loss.tsv").write_text("step\tloss\tkl\n1\t3.0\t0.0\n2\t2.5\t0.1\n")
    return tmp_path, summary, long


def test_run_plots_all_written(run_tables):
    root, summary, long = run_tables
    out = root / "plots"
    argv = [
        "plot-run",
        "--output-dir",
        str(out),
        "--summary",
        str(summary),
        "--reasoning",
        str(long),
        "--eval-games",
        str(root / "summary" / "eval_games.tsv"),
        "--samples",
        *(f"{e}={root / f'epoch{e}' / 'samples.parquet'}" for e in (1, 2)),
        "--loss",
        f"imitation={root / 'imitation' / 'loss.tsv'}",
        *(f"epoch{e}={root / f'epoch{e}' / 'loss.tsv'}" for e in (1, 2)),
        "--benchmarks",
        *(
            f"selfplay/epoch{e}/shard_{s:03d}={root / 'benchmarks' / f'epoch{e}' / 'selfplay'}"
            f"/shard_{s:03d}.tsv"
            for e in (1, 2)
            for s in range(2)
        ),
    ]
    assert main(argv) == 0
    for name in RUN_PLOTS:
        assert _is_png(out / name), name
    assert sorted(p.name for p in out.iterdir()) == sorted(RUN_PLOTS)  # no temporary left


def test_run_plots_without_optional_inputs(run_tables, tmp_path):
    _, summary, _ = run_tables
    out = tmp_path / "bare"
    assert main(["plot-run", "--output-dir", str(out), "--summary", str(summary)]) == 0
    for name in RUN_PLOTS:
        assert _is_png(out / name), name


def test_epoch_plots(tmp_path):
    files = make_epoch_files(tmp_path, 3)
    episodes = tmp_path / "episodes.parquet"
    pq.write_table(
        pa.table(
            {
                "episode_id": ["a", "b", "c"],
                "outcome": ["tie", "attacker_wins", "defender_wins"],
                "num_messages": [10, 3, 4],
            }
        ),
        episodes,
    )
    out = tmp_path / "plots" / "epoch3"
    assert (
        main(
            [
                "plot-epoch",
                "--epoch",
                "3",
                "--output-dir",
                str(out),
                "--samples",
                str(files["samples"]),
                "--loss",
                str(files["loss"]),
                "--episodes",
                str(episodes),
            ]
        )
        == 0
    )
    for name in EPOCH_PLOTS:
        assert _is_png(out / name), name


def test_epoch_plots_need_their_inputs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plot-epoch", "--epoch", "1", "--output-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert "--samples, --loss, --episodes" in capsys.readouterr().err


def test_missing_summary_names_the_file(tmp_path):
    from spag.report.plots import run_plots

    with pytest.raises(SpagInputError, match="nope.tsv"):
        run_plots(tmp_path, summary=tmp_path / "nope.tsv", game=TABOO)
    bad = tmp_path / "s.tsv"
    bad.write_text("x\n1\n")
    with pytest.raises(SpagInputError, match="s.tsv: missing column 'epoch'"):
        run_plots(tmp_path, summary=bad, game=TABOO)


def test_labelled_path_arguments():
    assert labelled_path("1=results/epoch1/samples.parquet") == (
        "1",
        "results/epoch1/samples.parquet",
    )
    assert labelled_path("odd=dir/a=b.tsv") == ("odd", "dir/a=b.tsv")  # the first '=' ends it
    for bad in ("results/epoch1/loss.tsv", "=x.tsv", "label=", " =x.tsv"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not LABEL=PATH"):
            labelled_path(bad)
    parser = argparse.ArgumentParser()
    parser.add_argument("--loss", nargs="+", type=labelled_path, action=LabelledPaths)
    args = parser.parse_args(["--loss", "imitation=a.tsv", "epoch1=b.tsv"])
    assert args.loss == {"imitation": "a.tsv", "epoch1": "b.tsv"}
    assert list(args.loss) == ["imitation", "epoch1"]  # the order given


@pytest.mark.parametrize(
    "option,value,message",
    [
        ("--loss", "results/epoch1/loss.tsv", "argument --loss: 'results/epoch1/loss.tsv' is not "),
        ("--benchmarks", "=b.tsv", "argument --benchmarks: '=b.tsv' is not LABEL=PATH"),
        ("--samples", "1=a.parquet 1=b.parquet", "argument --samples: label '1' given twice"),
    ],
)
def test_plot_run_bad_labelled_argument_names_it(tmp_path, capsys, option, value, message):
    argv = ["plot-run", "--output-dir", str(tmp_path), "--summary", "s.tsv", option]
    with pytest.raises(SystemExit) as exc:
        main([*argv, *value.split()])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_plot_run_samples_label_is_an_epoch(run_tables, tmp_path, capsys):
    root, summary, _ = run_tables
    samples = f"first={root / 'epoch1' / 'samples.parquet'}"
    argv = ["plot-run", "--output-dir", str(tmp_path / "out"), "--summary", str(summary)]
    assert main([*argv, "--samples", samples]) == 2
    assert "--samples first=" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_step_runtime_sums_jobs_per_step(tmp_path, monkeypatch):
    import spag.report.plots as plots

    files = {}
    for label, s in (("selfplay/epoch1/shard_000", 2), ("selfplay/epoch1/shard_001", 3)):
        files[label] = tmp_path / f"{label.replace('/', '_')}.tsv"
        files[label].write_text(f"s\th:m:s\n{s}\t0:00:0{s}\n")
    files["train_spag/epoch1"] = tmp_path / "train.tsv"
    files["train_spag/epoch1"].write_text("s\n10\n")
    files["no_time/epoch1"] = tmp_path / "no_time.tsv"
    files["no_time/epoch1"].write_text("max_rss\n1\n")
    assert benchmark_step("selfplay/epoch1/shard_000") == "selfplay"
    assert benchmark_step("target_words") == "target_words"
    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, path: figures.append(fig))
    plots.plot_step_runtime(files, "unused.png")
    (ax,) = figures[0].axes
    bars = {
        t.get_text(): p.get_width() for t, p in zip(ax.get_yticklabels(), ax.patches, strict=True)
    }
    assert bars == {"selfplay": 5.0, "train_spag": 10.0}


def test_plots_do_not_import_torch():
    code = (
        "import sys; from spag.cli import main; import spag.report.plots; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_generation_speed_is_the_summarys(run_tables, monkeypatch):
    """The plot draws the summary's tokens/s (from the shard benchmarks), computed once."""
    import spag.report.plots as plots

    _, summary, _ = run_tables
    df = pd.read_csv(summary, sep="\t")
    assert df["gen_tokens_per_s"].tolist() == pytest.approx([12.0, 12.0])  # 60 tokens, 5 s
    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, path: figures.append(fig))
    plots.plot_generation_speed(df, "unused.png")
    (line,) = figures[0].axes[1].get_lines()
    assert list(line.get_ydata()) == pytest.approx([12.0, 12.0])


def _drawn_win_rates(monkeypatch, summary, eval_games=None):
    """The axis of the win-rate plot, kept from being closed."""
    import spag.report.plots as plots

    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, path: figures.append(fig))
    plots.plot_win_rates(summary, "unused.png", eval_games, game=TABOO)
    (fig,) = figures
    return fig.axes[0]


def test_win_rate_plot_shows_intervals_and_m0_reference(run_tables, monkeypatch):
    from matplotlib.container import ErrorbarContainer

    root, summary, _ = run_tables
    games = pd.read_csv(root / "summary" / "eval_games.tsv", sep="\t")
    # M0 stands out, so that its reference lines are told apart from the others' rates.
    m0 = games["model"] == "imitation"
    games.loc[m0, ["win_rate", "win_rate_lo", "win_rate_hi"]] = [0.9, 0.6, 0.98]
    ax = _drawn_win_rates(monkeypatch, pd.read_csv(summary, sep="\t"), games)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["base", "M0", "M1", "M2"]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 3  # as attacker, as defender, both roles
    for bar in bars:
        (segments,) = bar.lines[2]
        spans = [seg[:, 1] for seg in segments.get_segments()]
        assert len(spans) == 4 and all(lo < hi for lo, hi in spans)
    # Both roles (the third series), M0 (the second model): its interval [0.6, 0.98].
    seg = bars[2].lines[2][0].get_segments()[1]
    assert (seg[0, 1], seg[1, 1]) == pytest.approx((0.6, 0.98))
    flat = [
        ln for ln in ax.get_lines() if len(set(ln.get_ydata())) == 1 and ln.get_linestyle() == "--"
    ]
    assert sorted(float(ln.get_ydata()[0]) for ln in flat) == pytest.approx([0.9, 0.9, 0.9])
    assert "M0 (reference)" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert "opponent" in ax.get_title()


def test_win_rate_table_from_the_epoch_summary_alone(run_tables, monkeypatch):
    _, summary, _ = run_tables
    df = pd.read_csv(summary, sep="\t")
    table = win_rate_table(df, game=TABOO)
    assert sorted(table["epoch"].unique()) == [1, 2]
    assert set(table["model"]) == {"epoch1", "epoch2"}
    assert table["win_rate_lo"].notna().all() and (table["win_rate_lo"] < table["win_rate"]).all()
    ax = _drawn_win_rates(monkeypatch, df)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["M1", "M2"]
    assert not [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]  # no M0 row


def test_eval_games_table_needs_its_columns(run_tables, tmp_path):
    from spag.report.plots import run_plots

    _, summary, _ = run_tables
    bad = tmp_path / "eval_games.tsv"
    bad.write_text("model\trole\nbase\tall\n")
    with pytest.raises(SpagInputError, match="eval_games.tsv: missing columns 'epoch', 'win"):
        run_plots(tmp_path / "out", summary=summary, eval_games=bad, game=TABOO)


def test_plot_names_have_captions():
    for plot in RUN_PLOTS.values():
        assert (REPO / "report" / f"{plot.key}.rst").is_file(), plot.key
    for plot in EPOCH_PLOTS.values():
        assert (REPO / "report" / f"epoch_{plot.key}.rst").is_file(), plot.key


def _job(stdout: str, rule: str) -> list[str]:
    """The dry run's text of every job of ``rule`` (from 'rule NAME:' to the blank line)."""
    return re.findall(rf"^rule {rule}:\n(.*?)(?:\n\n|\Z)", stdout, flags=re.S | re.M)


def _field(block: str, name: str) -> list[str]:
    (line,) = [ln for ln in block.splitlines() if ln.strip().startswith(f"{name}: ")]
    return line.split(": ", 1)[1].split(", ")


def test_rules_declare_the_package_plot_files(tmp_path):
    """rules/report.smk's plot outputs are spag.report.names' files; plot-run gets labels."""
    wd = make_workdir(tmp_path / "wd")
    res = snakemake(wd, "report_inputs", "-n", "-p", config={"epochs": 2})
    assert res.returncode == 0, res.stderr + res.stdout
    (run,) = _job(res.stdout, "plots")
    assert _field(run, "output") == [f"results/plots/{name}" for name in RUN_PLOTS]
    epochs = _job(res.stdout, "epoch_plots")
    assert sorted(tuple(_field(b, "output")) for b in epochs) == [
        tuple(f"results/plots/epoch{e}/{name}" for name in EPOCH_PLOTS) for e in (1, 2)
    ]
    (shell,) = [ln for ln in res.stdout.splitlines() if "spag plot-run " in ln]
    assert "--samples 1=results/epoch1/samples.parquet 2=results/epoch2/samples.parquet " in shell
    assert (
        "--loss imitation=results/imitation/loss.tsv epoch1=results/epoch1/loss.tsv "
        "epoch2=results/epoch2/loss.tsv " in shell
    )
    benchmarks = shell.split("--benchmarks ")[1].split(" >")[0].split()
    labels = dict(entry.split("=", 1) for entry in benchmarks)
    assert len(labels) == len(benchmarks)  # one label per job
    assert labels["train_spag/epoch2"] == "results/benchmarks/epoch2/train.tsv"
    assert labels["selfplay/epoch1/shard_002"] == "results/benchmarks/epoch1/selfplay/shard_002.tsv"
    assert (
        labels["eval_play_baseline/imitation/shard_000"]
        == "results/benchmarks/eval/play_imitation/shard_000.tsv"
    )
    assert (
        labels["eval_play/epoch2/shard_000"] == "results/benchmarks/epoch2/eval_play/shard_000.tsv"
    )
    assert labels["eval_merge/epoch1"] == "results/benchmarks/epoch1/eval_merge.tsv"
    assert labels["target_words"] == "results/benchmarks/target_words.tsv"
    # Every benchmark file the rule waits for is passed, labelled, to plot-run.
    assert {p for p in _field(run, "input") if "/benchmarks/" in p} == set(labels.values())
