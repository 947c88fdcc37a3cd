"""Report plots (spag plots): every file is written, with data or with a 'no data' note."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spag.cli import main
from spag.errors import SpagInputError
from spag.plots import EPOCH_PLOTS, RUN_PLOTS, benchmark_step, source_name, win_rate_table
from test_summarize import eval_games_tsv, make_epoch_files, reasoning_json, summarize_argv

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
                "summarize",
                "--collect",
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
        "plots",
        "--output-dir",
        str(out),
        "--summary",
        str(summary),
        "--reasoning",
        str(long),
        "--eval-games",
        str(root / "summary" / "eval_games.tsv"),
        "--samples",
        *(str(root / f"epoch{e}" / "samples.parquet") for e in (1, 2)),
        "--loss",
        str(root / "imitation" / "loss.tsv"),
        *(str(root / f"epoch{e}" / "loss.tsv") for e in (1, 2)),
        "--benchmarks",
        *map(str, sorted((root / "benchmarks").rglob("*.tsv"))),
    ]
    assert main(argv) == 0
    for name in RUN_PLOTS:
        assert _is_png(out / name), name
    assert sorted(p.name for p in out.iterdir()) == sorted(RUN_PLOTS)  # no temporary left


def test_run_plots_without_optional_inputs(run_tables, tmp_path):
    _, summary, _ = run_tables
    out = tmp_path / "bare"
    assert main(["plots", "--output-dir", str(out), "--summary", str(summary)]) == 0
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
                "plots",
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
    assert main(["plots", "--epoch", "1", "--output-dir", str(tmp_path)]) == 2
    assert "--episodes" in capsys.readouterr().err


def test_missing_summary_names_the_file(tmp_path):
    from spag.plots import run_plots

    with pytest.raises(SpagInputError, match="nope.tsv"):
        run_plots(tmp_path, summary=tmp_path / "nope.tsv")
    bad = tmp_path / "s.tsv"
    bad.write_text("x\n1\n")
    with pytest.raises(SpagInputError, match="s.tsv: missing column 'epoch'"):
        run_plots(tmp_path, summary=bad)


def test_names_from_paths():
    assert source_name("results/epoch12/loss.tsv") == "epoch12"
    assert source_name("results/imitation/loss.tsv") == "imitation"
    assert benchmark_step("results/benchmarks/epoch2/selfplay/shard_001.tsv") == "selfplay"
    assert benchmark_step("results/benchmarks/epoch2/train.tsv") == "train"
    assert benchmark_step("results/benchmarks/eval/reasoning_epoch1.tsv") == "eval_reasoning"
    assert benchmark_step("results/benchmarks/imitation/train.tsv") == "imitation_train"


def test_plots_do_not_import_torch():
    code = (
        "import sys; from spag.cli import main; import spag.plots; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_selfplay_seconds_from_benchmarks(run_tables):
    from spag.plots import selfplay_seconds

    root, _, _ = run_tables
    benches = sorted((root / "benchmarks").rglob("*.tsv"))
    other = root / "benchmarks" / "epoch1" / "train.tsv"
    other.write_text("s\n100\n")
    assert selfplay_seconds([*benches, other]) == {1: 5.0, 2: 5.0}


def _drawn_win_rates(monkeypatch, summary, eval_games=None):
    """The axis of the win-rate plot, kept from being closed."""
    import spag.plots as plots

    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, path: figures.append(fig))
    plots.plot_win_rates(summary, "unused.png", eval_games)
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
    table = win_rate_table(df)
    assert sorted(table["epoch"].unique()) == [1, 2]
    assert set(table["model"]) == {"epoch1", "epoch2"}
    assert table["win_rate_lo"].notna().all() and (table["win_rate_lo"] < table["win_rate"]).all()
    ax = _drawn_win_rates(monkeypatch, df)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["M1", "M2"]
    assert not [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]  # no M0 row


def test_eval_games_table_needs_its_columns(run_tables, tmp_path):
    from spag.plots import run_plots

    _, summary, _ = run_tables
    bad = tmp_path / "eval_games.tsv"
    bad.write_text("model\trole\nbase\tall\n")
    with pytest.raises(SpagInputError, match="eval_games.tsv: missing column 'epoch'"):
        run_plots(tmp_path / "out", summary=summary, eval_games=bad)
