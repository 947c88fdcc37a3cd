"""``spag plots``: PNG plots of a run for the Snakemake report (matplotlib, no torch).

Run-wide plots (rule ``plots``)::

    spag plots --output-dir results/plots --summary results/summary/epochs.tsv
        [--reasoning results/summary/reasoning.tsv] [--samples EPOCH_SAMPLES ...]
        [--loss LOSS.tsv ...] [--benchmarks BENCHMARK.tsv ...]
        [--eval-games results/summary/eval_games.tsv]

One epoch's plots (rule ``epoch_plots``)::

    spag plots --output-dir results/plots/epoch1 --epoch 1 --samples SAMPLES.parquet
        --loss LOSS.tsv --episodes EPISODES.parquet
"""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger("spag.plots")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output-dir", required=True, help="folder for the PNG files")
    p.add_argument(
        "--epoch",
        type=int,
        default=None,
        help="draw one epoch's plots (needs one --samples, --loss and --episodes)",
    )
    p.add_argument("--summary", help="all-epoch summary (results/summary/epochs.tsv)")
    p.add_argument("--reasoning", help="long reasoning table (results/summary/reasoning.tsv)")
    p.add_argument(
        "--eval-games",
        help="evaluation games of all models (results/summary/eval_games.tsv): the win-rate "
        "plot then shows the base model and M0 too",
    )
    p.add_argument(
        "--samples",
        nargs="*",
        default=[],
        help="samples.parquet files (epoch taken from the path .../epoch<N>/...)",
    )
    p.add_argument(
        "--loss",
        nargs="*",
        default=[],
        help="training logs (loss.tsv); the stage is taken from the path",
    )
    p.add_argument("--benchmarks", nargs="*", default=[], help="Snakemake benchmark TSV files")
    p.add_argument("--episodes", help="judged episodes of the epoch (epoch mode)")


def run(args: argparse.Namespace) -> int:
    from spag.errors import SpagInputError
    from spag.plots import epoch_plots, run_plots

    if args.epoch is not None:
        if len(args.samples) != 1 or len(args.loss) != 1 or not args.episodes:
            raise SpagInputError("--epoch needs exactly one --samples, one --loss and --episodes")
        written = epoch_plots(
            args.output_dir,
            epoch=args.epoch,
            samples=args.samples[0],
            loss=args.loss[0],
            episodes=args.episodes,
        )
    else:
        if not args.summary:
            raise SpagInputError("--summary is required (or --epoch for one epoch's plots)")
        written = run_plots(
            args.output_dir,
            summary=args.summary,
            reasoning=args.reasoning,
            samples=args.samples,
            losses=args.loss,
            benchmarks=args.benchmarks,
            eval_games=args.eval_games,
        )
    for path in written:
        log.info("wrote %s", path)
    return 0
