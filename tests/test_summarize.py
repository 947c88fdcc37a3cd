"""Per-epoch summary rows and the run-wide summary tables (spag summarize-epoch / -run)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spag.cli import main
from spag.data.tables import SAMPLE_SCHEMA
from spag.errors import SpagInputError
from spag.evaluation.games import COLUMNS as EVAL_COLUMNS
from spag.evaluation.games import wilson_interval
from spag.game.taboo import TABOO
from spag.models.names import model_order
from spag.report.summary import (
    GMEAN_TASK,
    REASONING_COLUMNS,
    collect_epochs,
    collect_eval_games,
    collect_reasoning,
    epoch_summary,
    eval_summary,
    generation_summary,
    outcome_summary,
    sample_summary,
    summary_columns,
)

OUTCOME_COUNTS = {"attacker_wins": 3, "defender_wins": 1, "attacker_broke_rules": 2, "tie": 4}
LOSS_TSV = (
    "step\tepoch\tloss\tkl\tratio_mean\tratio_min\tratio_max\tclipped_frac\tn_game\tn_sft\t"
    "learning_rate\tgrad_norm\ttokens_per_s\tpad_frac\n"
    "1\t0.5\t2.0\t0.01\t1.0\t0.9\t1.1\t0.0\t4\t4\t1e-4\t1.0\t100\t0.1\n"
    "2\t1.0\t1.0\t0.03\t1.02\t0.95\t1.2\t0.25\t4\t4\t5e-5\t0.8\t300\t0.1\n"
)
# An evaluation games table as written before the intervals existed: the summary
# computes them from the counts.
EVAL_TSV = (
    "epoch\tmodel\topponent\trole\tgames\twins\tlosses\tties\tbroke_rules\twin_rate\tloss_rate\t"
    "tie_rate\n"
    "{e}\t{model}\topponent\tattacker\t4\t1\t2\t1\t0\t0.250000\t0.500000\t0.250000\n"
    "{e}\t{model}\topponent\tdefender\t4\t2\t1\t1\t1\t0.500000\t0.250000\t0.250000\n"
    "{e}\t{model}\topponent\tall\t8\t3\t3\t2\t1\t0.375000\t0.375000\t0.250000\n"
)


def eval_games_tsv(path: Path, model: str, epoch: int) -> Path:
    """One model's evaluation games table (the shape ``spag eval-games`` writes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(EVAL_TSV.format(e=epoch, model=model), encoding="utf-8")
    return path


def reasoning_json(path: Path, name: str, scores: dict[str, float]) -> Path:
    tasks = {
        t: {
            "acc": s,
            "acc_stderr": 0.05,
            "acc_norm": s / 2,
            "acc_norm_stderr": 0.04,
            "metric": "acc",
            "score": s,
            "num_samples": 20,
        }
        for t, s in scores.items()
    }
    record = {
        "model_name": name,
        "model_path": f"/m/{name}",
        "lm_eval_version": "0.4.13",
        "requested_tasks": list(scores),
        "tasks": tasks,
        "subtasks": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def samples_parquet(path: Path, n_att: int = 3, n_def: int = 1, n_sft: int = 2) -> Path:
    rows = []
    n = n_att + n_def
    for role, count in (("attacker", n_att), ("defender", n_def)):
        for k in range(count):
            rows.append(
                {
                    "type": "game",
                    "role": role,
                    "episode_id": f"g{k}",
                    "turn": k,
                    "query": "q",
                    "target": "t",
                    "reward": 0.1 * (k + 1),
                    "weight": n / (2 * count),
                }
            )
    for _ in range(n_sft):
        rows.append(
            {
                "type": "sft",
                "role": None,
                "episode_id": None,
                "turn": None,
                "query": "q",
                "target": "t",
                "reward": 1.0,
                "weight": 1.0,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA), path)
    return path


def shard_parquet(path: Path, tokens: list[int], outcome_col: bool = False) -> Path:
    n = len(tokens)
    cols = {
        "episode_id": [f"{path.stem}-{i}" for i in range(n)],
        "target_word": ["apple"] * n,
        "max_turns": [5] * n,
        "history": [[{"role": "attacker", "content": "hi"}]] * n,
        "num_generated_tokens": tokens,
        "empty_replies": [1] * n,
        "truncated_replies": [0] * n,
    }
    if outcome_col:
        cols["outcome"] = ["tie"] * n
        cols["num_messages"] = [1] * n
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path)
    return path


def make_epoch_files(root: Path, epoch: int, scores: dict[str, float] | None = None) -> dict:
    """Write every input of one epoch's summary under root/epoch<e>/, like a run does."""
    d = root / f"epoch{epoch}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "outcomes.tsv").write_text(
        "epoch\t"
        + "\t".join(OUTCOME_COUNTS)
        + "\ttotal\n"
        + f"{epoch}\t"
        + "\t".join(map(str, OUTCOME_COUNTS.values()))
        + "\t10\n",
        encoding="utf-8",
    )
    (d / "loss.tsv").write_text(LOSS_TSV, encoding="utf-8")
    eval_games_tsv(d / "eval" / "games.tsv", f"epoch{epoch}", epoch)
    bench = root / "benchmarks" / f"epoch{epoch}" / "selfplay"
    bench.mkdir(parents=True, exist_ok=True)
    benches = []
    for s in range(2):
        b = bench / f"shard_{s:03d}.tsv"
        b.write_text("s\th:m:s\tmax_rss\n2.5\t0:00:02\t100\n", encoding="utf-8")
        benches.append(b)
    files = {
        "outcomes": d / "outcomes.tsv",
        "samples": samples_parquet(d / "samples.parquet"),
        "loss": d / "loss.tsv",
        "eval_games": d / "eval" / "games.tsv",
        "reasoning": reasoning_json(
            root / "eval" / "reasoning" / f"epoch{epoch}.json",
            f"epoch{epoch}",
            scores or {"task_a": 0.5, "task_b": 0.8},
        ),
        "selfplay": [
            shard_parquet(d / "selfplay" / f"shard_{s:03d}.parquet", [10, 20]) for s in range(2)
        ],
        "selfplay_benchmarks": benches,
    }
    return files


def summarize_argv(epoch: int, files: dict, out: Path, benchmarks: bool = False) -> list[str]:
    """The `spag summarize-epoch` command line over ``make_epoch_files`` output."""
    argv = ["summarize-epoch", "--epoch", str(epoch)]
    for key in ("outcomes", "samples", "loss", "eval_games", "reasoning"):
        argv += [f"--{key.replace('_', '-')}", str(files[key])]
    argv += ["--selfplay", *map(str, files["selfplay"])]
    if benchmarks:
        argv += ["--selfplay-benchmarks", *map(str, files["selfplay_benchmarks"])]
    return [*argv, "--output", str(out)]


def test_epoch_summary_row(tmp_path):
    files = make_epoch_files(tmp_path, 1)
    row = epoch_summary(1, **files, game=TABOO)
    assert row["epoch"] == 1
    assert row["selfplay_games"] == 10
    assert row["attacker_wins"] == 3 and row["tie"] == 4
    assert row["tie_frac"] == pytest.approx(0.4)
    assert row["decisive_games"] == 4 and row["decisive_frac"] == pytest.approx(0.4)
    assert row["game_samples"] == 4 and row["sft_samples"] == 2 and row["samples"] == 6
    assert row["attacker_samples"] == 3 and row["defender_samples"] == 1
    assert row["attacker_weight"] == pytest.approx(4 / 6)
    assert row["defender_weight"] == pytest.approx(2.0)
    assert row["reward_max"] == pytest.approx(0.3)
    assert row["train_steps"] == 2
    assert row["loss_first"] == 2.0 and row["loss_final"] == 1.0 and row["loss_mean"] == 1.5
    assert row["kl_final"] == pytest.approx(0.03)
    assert row["clipped_frac_mean"] == pytest.approx(0.125)
    assert row["eval_win_rate_attacker"] == pytest.approx(0.25)
    assert row["eval_loss_rate_defender"] == pytest.approx(0.25)
    assert row["eval_win_rate"] == pytest.approx(0.375)
    assert row["eval_games"] == 8 and row["eval_opponent"] == "opponent"
    assert row["eval_broke_rules_rate_defender"] == pytest.approx(0.25)
    assert (row["eval_win_rate_lo"], row["eval_win_rate_hi"]) == pytest.approx(
        wilson_interval(3, 8)
    )
    assert row["eval_loss_rate_attacker_hi"] == pytest.approx(wilson_interval(2, 4)[1])
    assert row["gen_games"] == 4 and row["gen_tokens"] == 60
    assert row["gen_tokens_per_game"] == pytest.approx(15.0)
    assert row["gen_seconds"] == pytest.approx(5.0)
    assert row["gen_tokens_per_s"] == pytest.approx(12.0)
    assert row["reasoning_task_a"] == 0.5
    assert row["reasoning_gmean"] == pytest.approx(math.sqrt(0.5 * 0.8))
    assert set(summary_columns(TABOO)) <= set(row)


def test_summarize_cli_writes_one_row(tmp_path):
    files = make_epoch_files(tmp_path, 2)
    out = tmp_path / "summary.tsv"
    argv = summarize_argv(2, files, out)
    assert main(argv) == 0
    df = pd.read_csv(out, sep="\t")
    assert len(df) == 1
    assert list(df.columns[:2]) == ["epoch", "selfplay_games"]
    assert df.loc[0, "epoch"] == 2
    assert df.loc[0, "reasoning_task_b"] == pytest.approx(0.8)
    # No benchmark files given and no time column in the shards: speed left empty.
    assert math.isnan(df.loc[0, "gen_tokens_per_s"])
    assert not list(tmp_path.glob(".summary.tsv.*"))


def test_missing_optional_columns_leave_cells_empty(tmp_path):
    shard = tmp_path / "s.parquet"
    pq.write_table(
        pa.table(
            {
                "episode_id": ["a"],
                "target_word": ["w"],
                "max_turns": [5],
                "history": [[{"role": "attacker", "content": "x"}]],
            }
        ),
        shard,
    )
    row = generation_summary([shard])
    assert row["gen_games"] == 1
    assert math.isnan(row["gen_tokens"]) and math.isnan(row["gen_tokens_per_s"])


def test_shard_time_column_preferred_over_benchmarks(tmp_path):
    shard = shard_parquet(tmp_path / "s.parquet", [30, 30])
    t = pq.read_table(shard).append_column("generation_seconds", pa.array([4.0, 4.0]))
    pq.write_table(t, shard)
    row = generation_summary([shard], benchmarks=[])
    assert row["gen_seconds"] == pytest.approx(4.0)
    assert row["gen_tokens_per_s"] == pytest.approx(15.0)


def test_long_outcome_table_and_zero_games(tmp_path):
    p = tmp_path / "o.tsv"
    p.write_text("outcome\tcount\nattacker_wins\t2\ndefender_wins\t0\ntie\t2\n", encoding="utf-8")
    row = outcome_summary(p, game=TABOO)
    assert row["selfplay_games"] == 4 and row["attacker_broke_rules"] == 0
    assert row["attacker_wins_frac"] == 0.5
    p.write_text("epoch\t" + "\t".join(OUTCOME_COUNTS) + "\ttotal\n1\t0\t0\t0\t0\t0\n")
    row = outcome_summary(p, game=TABOO)
    assert row["decisive_games"] == 0 and math.isnan(row["decisive_frac"])


def test_sample_summary_without_game_samples(tmp_path):
    p = samples_parquet(tmp_path / "s.parquet", n_att=0, n_def=0, n_sft=3)
    row = sample_summary(p, game=TABOO)
    assert row["game_samples"] == 0 and row["attacker_weight"] == 0.0
    assert math.isnan(row["reward_mean"])


def test_bad_inputs_name_the_file(tmp_path):
    bad = tmp_path / "outcomes.tsv"
    bad.write_text("epoch\tattacker_wins\n1\t3\n", encoding="utf-8")
    with pytest.raises(SpagInputError, match="outcomes.tsv.*defender_wins"):
        outcome_summary(bad, game=TABOO)
    with pytest.raises(SpagInputError, match="not found"):
        outcome_summary(tmp_path / "nope.tsv", game=TABOO)
    loss = tmp_path / "loss.tsv"
    loss.write_text("step\tkl\n1\t0.1\n", encoding="utf-8")
    files = make_epoch_files(tmp_path, 1)
    files["loss"] = loss
    with pytest.raises(SpagInputError, match="loss.tsv: missing column 'loss'"):
        epoch_summary(1, **files, game=TABOO)
    broken = tmp_path / "r.json"
    broken.write_text("{not json", encoding="utf-8")
    files = make_epoch_files(tmp_path, 1)
    files["reasoning"] = broken
    with pytest.raises(SpagInputError, match="r.json: not valid JSON"):
        epoch_summary(1, **files, game=TABOO)


def test_cli_bad_input_exits_2(tmp_path, capsys):
    out = tmp_path / "x.tsv"
    with pytest.raises(SystemExit) as exc:
        main(["summarize-epoch", "--epoch", "1", "--output", str(out)])
    assert exc.value.code == 2
    assert "--outcomes" in capsys.readouterr().err
    assert not out.exists()
    files = make_epoch_files(tmp_path, 1)
    files["outcomes"] = tmp_path / "nope.tsv"
    assert main(summarize_argv(1, files, out)) == 2
    assert "nope.tsv" in capsys.readouterr().err
    assert not out.exists()


def test_collect_epochs_and_reasoning(tmp_path):
    summaries = []
    for e in (2, 1):
        files = make_epoch_files(tmp_path, e, {"task_a": 0.4 + 0.1 * e, "task_b": 0.9})
        p = tmp_path / f"epoch{e}" / "summary.tsv"
        assert main(summarize_argv(e, files, p)) == 0
        summaries.append(p)
    df = collect_epochs(summaries, game=TABOO)
    assert df["epoch"].tolist() == [1, 2]

    base = reasoning_json(tmp_path / "base.json", "base", {"task_a": 0.25, "task_b": 0.0})
    m0 = reasoning_json(tmp_path / "imitation.json", "imitation", {"task_a": 0.3, "task_b": 0.6})
    paths = [
        tmp_path / "eval" / "reasoning" / "epoch2.json",
        base,
        m0,
        tmp_path / "eval" / "reasoning" / "epoch1.json",
    ]
    long = collect_reasoning(paths)
    assert long["model"].drop_duplicates().tolist() == ["base", "imitation", "epoch1", "epoch2"]
    assert long["epoch"].drop_duplicates().tolist() == [-1, 0, 1, 2]
    gm = long[long["task"] == GMEAN_TASK].set_index("model")["score"]
    assert gm["base"] == 0.0  # a zero score makes the geometric mean 0
    assert gm["imitation"] == pytest.approx(math.sqrt(0.18))
    assert long.groupby("model").tail(1)["task"].eq(GMEAN_TASK).all()

    out, rout = tmp_path / "summary" / "epochs.tsv", tmp_path / "summary" / "reasoning.tsv"
    assert (
        main(
            [
                "summarize-run",
                "--epoch-summaries",
                *map(str, summaries),
                "--reasoning",
                *map(str, paths),
                "--output",
                str(out),
                "--reasoning-output",
                str(rout),
            ]
        )
        == 0
    )
    assert pd.read_csv(out, sep="\t")["epoch"].tolist() == [1, 2]
    assert len(pd.read_csv(rout, sep="\t")) == 12


def test_eval_summary_intervals(tmp_path):
    """Intervals per role from the counts; a table with rates only keeps its rate columns."""
    row = eval_summary(eval_games_tsv(tmp_path / "games.tsv", "epoch1", 1), game=TABOO)
    for suffix, (n, k) in (("_attacker", (4, 1)), ("_defender", (4, 2)), ("", (8, 3))):
        lo, hi = wilson_interval(k, n)
        assert row[f"eval_win_rate{suffix}"] == pytest.approx(k / n)
        assert row[f"eval_win_rate{suffix}_lo"] == pytest.approx(lo)
        assert row[f"eval_win_rate{suffix}_hi"] == pytest.approx(hi)
    assert row["eval_broke_rules_rate_attacker"] == 0.0
    assert row["eval_broke_rules_rate_attacker_lo"] == 0.0
    assert row["eval_broke_rules_rate_attacker_hi"] == pytest.approx(wilson_interval(0, 4)[1])
    eval_cols = [c for c in summary_columns(TABOO) if c.startswith("eval_") and "_rate" in c]
    assert set(eval_cols) <= set(row)
    assert len(eval_cols) == 3 * 4 * 3  # roles (attacker, defender, all) x rates x bounds

    rates_only = tmp_path / "rates.tsv"
    rates_only.write_text("role\twin_rate\twin_rate_lo\nall\t0.5\t0.2\n", encoding="utf-8")
    row = eval_summary(rates_only, game=TABOO)
    assert row["eval_win_rate"] == 0.5 and row["eval_win_rate_lo"] == 0.2
    assert math.isnan(row["eval_win_rate_hi"]) and math.isnan(row["eval_win_rate_attacker"])


def test_collect_eval_games_in_run_order(tmp_path):
    """base, M0 and every M(e) against the opponent, one row per model and role."""
    paths = [
        eval_games_tsv(tmp_path / "epoch2" / "eval" / "games.tsv", "epoch2", 2),
        eval_games_tsv(tmp_path / "eval" / "games" / "imitation.tsv", "imitation", 0),
        eval_games_tsv(tmp_path / "epoch1" / "eval" / "games.tsv", "epoch1", 1),
        # epoch column as a hand-run `spag eval-games` leaves it: the model name decides
        eval_games_tsv(tmp_path / "eval" / "games" / "base.tsv", "base", 0),
    ]
    df = collect_eval_games(paths, game=TABOO)
    assert list(df.columns) == list(EVAL_COLUMNS)
    assert df["model"].drop_duplicates().tolist() == ["base", "imitation", "epoch1", "epoch2"]
    assert df["epoch"].drop_duplicates().tolist() == [-1, 0, 1, 2]
    assert df["role"].tolist()[:3] == ["attacker", "defender", "all"]
    all_rows = df[df["role"] == "all"]
    assert all_rows["win_rate"].tolist() == pytest.approx([0.375] * 4)
    lo, hi = wilson_interval(3, 8)
    assert all_rows["win_rate_lo"].tolist() == pytest.approx([lo] * 4)
    assert all_rows["win_rate_hi"].tolist() == pytest.approx([hi] * 4)
    assert df["broke_rules_rate"].tolist()[:3] == pytest.approx([0.0, 0.25, 0.125])

    summary = tmp_path / "summary.tsv"
    files = make_epoch_files(tmp_path, 1)
    assert main(summarize_argv(1, files, summary)) == 0
    out = tmp_path / "summary" / "eval_games.tsv"
    argv = ["summarize-run", "--epoch-summaries", str(summary), "--output"]
    argv += [str(tmp_path / "summary" / "epochs.tsv")]
    assert main([*argv, "--eval-games", *map(str, paths), "--eval-games-output", str(out)]) == 0
    written = pd.read_csv(out, sep="\t")
    assert len(written) == 12 and written["model"].iloc[0] == "base"
    assert written["win_rate_hi"].iloc[-1] == pytest.approx(hi, abs=1e-5)
    # The epoch table carries the epoch's intervals too.
    epochs = pd.read_csv(tmp_path / "summary" / "epochs.tsv", sep="\t")
    assert epochs.loc[0, "eval_win_rate_lo"] == pytest.approx(lo, abs=1e-5)


def test_collect_eval_games_bad_inputs(tmp_path, capsys):
    bad = tmp_path / "games.tsv"
    bad.write_text("model\trole\tgames\nbase\tall\t3\n", encoding="utf-8")
    with pytest.raises(SpagInputError, match="games.tsv: missing column.*wins"):
        collect_eval_games([bad], game=TABOO)
    with pytest.raises(SpagInputError, match="no evaluation games table"):
        collect_eval_games([], game=TABOO)
    files = make_epoch_files(tmp_path, 1)
    out = tmp_path / "s.tsv"
    assert main(summarize_argv(1, files, out)) == 0
    argv = ["summarize-run", "--epoch-summaries", str(out), "--output", str(tmp_path / "e")]
    assert main([*argv, "--eval-games", str(files["eval_games"])]) == 2
    assert "--eval-games-output" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()
    argv = summarize_argv(1, files, tmp_path / "one.tsv")
    i = argv.index("--eval-games")
    argv.insert(i + 1, str(files["eval_games"]))  # one epoch has one table
    with pytest.raises(SystemExit):
        main(argv)
    assert "unrecognized arguments" in capsys.readouterr().err


def test_model_order():
    assert [model_order(n) for n in ("base", "imitation", "epoch1", "epoch12")] == [-1, 0, 1, 12]
    with pytest.raises(SpagInputError, match="model name 'other'"):
        model_order("other")


def test_collect_reasoning_refuses_a_model_twice(tmp_path):
    a = reasoning_json(tmp_path / "a.json", "epoch1", {"task_a": 0.5})
    b = reasoning_json(tmp_path / "b.json", "epoch1", {"task_a": 0.6})
    with pytest.raises(SpagInputError, match="b.json: a second reasoning result of model"):
        collect_reasoning([a, b])


def test_a_run_without_reasoning_tasks(tmp_path):
    """evaluation.reasoning.tasks: [] — the rules give `--reasoning` no file: the epoch row
    leaves reasoning_gmean empty, the reasoning table is its header, the plot says so."""
    files = make_epoch_files(tmp_path, 1)
    summary = tmp_path / "epoch1" / "summary.tsv"
    argv = summarize_argv(1, files, summary)
    at = argv.index("--reasoning")
    argv[at + 1 : at + 2] = []  # `--reasoning` followed by the next option, as rendered
    assert argv[at + 1] == "--selfplay"
    assert main(argv) == 0
    row = pd.read_csv(summary, sep="\t").iloc[0]
    assert math.isnan(row["reasoning_gmean"])
    assert not [c for c in row.index if c.startswith("reasoning_") and c != "reasoning_gmean"]

    out, rout = tmp_path / "summary" / "epochs.tsv", tmp_path / "summary" / "reasoning.tsv"
    argv = ["summarize-run", "--epoch-summaries", str(summary), "--reasoning",
            "--output", str(out), "--reasoning-output", str(rout), "--commit", "abc"]  # fmt: skip
    assert main(argv) == 0
    table = pd.read_csv(rout, sep="\t")
    assert table.empty and list(table.columns) == [*REASONING_COLUMNS, "commit"]
    assert math.isnan(pd.read_csv(out, sep="\t").loc[0, "reasoning_gmean"])

    plots = tmp_path / "plots"
    argv = ["plot-run", "--output-dir", str(plots), "--summary", str(out), "--reasoning", str(rout)]
    assert main(argv) == 0
    assert (plots / "reasoning.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
