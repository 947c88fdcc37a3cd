"""``spag plot-run``: the run-wide plots for the Snakemake report (rule ``plots``).

::

    spag plot-run --output-dir results/plots --summary results/summary/epochs.tsv
        [--reasoning results/summary/reasoning.tsv]
        [--eval-games results/summary/eval_games.tsv]
        [--samples 1=results/epoch1/samples.parquet ...]
        [--loss imitation=results/imitation/loss.tsv epoch1=results/epoch1/loss.tsv ...]
        [--benchmarks train_spag/epoch1=results/benchmarks/epoch1/train.tsv ...]

Writes every file of :data:`spag.report.names.RUN_PLOTS` (matplotlib, no torch).
Inputs that stand for an epoch, a stage or a job are ``LABEL=PATH``: the label
says what the file is (samples: the epoch number; loss: the stage's name, the
legend; benchmarks: the step, then ``/`` and anything that tells its jobs apart).
"""

from __future__ import annotations

import argparse
import logging

from spag.game.settings import GameSettings
from spag.report.inputs import LabelledPaths, labelled_path

log = logging.getLogger("spag.plot_run")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--game", default=GameSettings.name, help="the game (config game.name)")
    p.add_argument("--output-dir", required=True, help="folder for the PNG files")
    p.add_argument("--summary", required=True, help="all-epoch summary (summary/epochs.tsv)")
    p.add_argument("--reasoning", help="long reasoning table (summary/reasoning.tsv)")
    p.add_argument(
        "--eval-games",
        help="evaluation games of all models (summary/eval_games.tsv): the win-rate "
        "plot then shows the base model and M0 too",
    )
    labelled = {"nargs": "+", "type": labelled_path, "action": LabelledPaths, "default": {}}
    p.add_argument(
        "--samples",
        metavar="EPOCH=PATH",
        help="training samples of each epoch (samples.parquet)",
        **labelled,
    )
    p.add_argument(
        "--loss",
        metavar="STAGE=PATH",
        help="training log (loss.tsv) of each stage, in run order; the stage names the curve",
        **labelled,
    )
    p.add_argument(
        "--benchmarks",
        metavar="STEP[/DETAIL]=PATH",
        help="Snakemake benchmark file of each job; the runtime plot sums them per STEP",
        **labelled,
    )


def run(args: argparse.Namespace) -> int:
    from spag.errors import SpagInputError
    from spag.game.base import load_game
    from spag.report.plots import run_plots

    samples = {}
    for label, path in args.samples.items():
        if not label.isdigit():
            raise SpagInputError(f"--samples {label}={path}: the label is not an epoch number")
        samples[int(label)] = path
    written = run_plots(
        args.output_dir,
        summary=args.summary,
        reasoning=args.reasoning,
        samples=samples,
        losses=args.loss,
        benchmarks=args.benchmarks,
        eval_games=args.eval_games,
        game=load_game(args.game),
    )
    for path in written:
        log.info("wrote %s", path)
    return 0
