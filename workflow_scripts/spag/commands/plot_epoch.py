"""``spag plot-epoch``: one epoch's plots for the Snakemake report (rule ``epoch_plots``).

::

    spag plot-epoch --epoch 1 --output-dir results/plots/epoch1
        --samples SAMPLES.parquet --loss LOSS.tsv --episodes EPISODES.parquet

Writes every file of :data:`spag.report.names.EPOCH_PLOTS` (matplotlib, no torch).
"""

from __future__ import annotations

import argparse
import logging

from spag.game.settings import GameSettings

log = logging.getLogger("spag.plot_epoch")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epoch", type=int, required=True, help="the epoch (plot titles)")
    p.add_argument("--output-dir", required=True, help="folder for the PNG files")
    p.add_argument("--samples", required=True, help="the epoch's samples.parquet")
    p.add_argument("--loss", required=True, help="the epoch's training log (loss.tsv)")
    p.add_argument("--episodes", required=True, help="the epoch's judged episodes")
    p.add_argument("--game", default=GameSettings.name, help="the game (config game.name)")


def run(args: argparse.Namespace) -> int:
    from spag.game.base import load_game
    from spag.report.plots import epoch_plots

    written = epoch_plots(
        args.output_dir,
        epoch=args.epoch,
        samples=args.samples,
        loss=args.loss,
        episodes=args.episodes,
        game=load_game(args.game),
    )
    for path in written:
        log.info("wrote %s", path)
    return 0
