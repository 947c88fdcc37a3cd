"""``spag summarize-epoch``: the summary row of one epoch (rule ``epoch_summary``).

::

    spag summarize-epoch --epoch E --outcomes OUTCOMES.tsv --samples SAMPLES.parquet
        --loss LOSS.tsv --eval-games GAMES.tsv --reasoning REASONING.json
        --selfplay SHARD.parquet [SHARD ...] [--selfplay-benchmarks TSV ...]
        --output SUMMARY.tsv

The row's columns are :data:`spag.report.summary.SUMMARY_COLUMNS`, then one
``reasoning_<task>`` column per reasoning task.
"""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger("spag.summarize_epoch")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epoch", type=int, required=True, help="epoch of the row")
    p.add_argument("--outcomes", required=True, help="self-play outcome counts (outcomes.tsv)")
    p.add_argument("--samples", required=True, help="training samples (samples.parquet)")
    p.add_argument("--loss", required=True, help="training log (loss.tsv)")
    p.add_argument("--eval-games", required=True, help="the epoch's eval/games.tsv")
    p.add_argument("--reasoning", required=True, help="the epoch model's reasoning JSON")
    p.add_argument("--selfplay", nargs="+", required=True, help="self-play shard files")
    p.add_argument(
        "--selfplay-benchmarks",
        nargs="*",
        default=[],
        help="Snakemake benchmark files of the self-play shards (time for tokens/s "
        "when the shards do not record it)",
    )
    p.add_argument("--output", required=True, help="summary TSV (one row)")


def run(args: argparse.Namespace) -> int:
    from spag.report.summary import epoch_summary, write_summary

    row = epoch_summary(
        args.epoch,
        outcomes=args.outcomes,
        samples=args.samples,
        loss=args.loss,
        eval_games=args.eval_games,
        reasoning=args.reasoning,
        selfplay=args.selfplay,
        selfplay_benchmarks=args.selfplay_benchmarks,
    )
    write_summary(row, args.output)
    log.info(
        "epoch %d: %d self-play games (%d decisive), %d samples, final loss %.4g, "
        "eval win rate %.3f [%.3f, %.3f], reasoning gmean %.4f",
        args.epoch,
        row["selfplay_games"],
        row["decisive_games"],
        row["samples"],
        row["loss_final"],
        row["eval_win_rate"],
        row["eval_win_rate_lo"],
        row["eval_win_rate_hi"],
        row["reasoning_gmean"],
    )
    return 0
