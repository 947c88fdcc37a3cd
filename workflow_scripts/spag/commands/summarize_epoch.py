"""``spag summarize-epoch``: the summary row of one epoch (rule ``epoch_summary``).

::

    spag summarize-epoch --epoch E --outcomes OUTCOMES.tsv --samples SAMPLES.parquet
        --loss LOSS.tsv --eval-games GAMES.tsv [--reasoning REASONING.json]
        --selfplay SHARD.parquet [SHARD ...] [--selfplay-benchmarks TSV ...]
        --output SUMMARY.tsv

The row's columns are :func:`spag.report.summary.summary_columns` of the game, then one
``reasoning_<task>`` column per reasoning task (none, and ``reasoning_gmean`` empty,
without ``--reasoning``: a run without reasoning tasks).
"""

from __future__ import annotations

import argparse
import logging
import os

from spag.game.settings import GameSettings
from spag.ops.tracking import (
    DEFAULT_DIR,
    ENV_PROJECT,
    ENV_REPORT_TO,
    ENV_RUN_NAME,
    ENV_TRACKING_DIR,
    folder_name,
)

log = logging.getLogger("spag.summarize_epoch")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epoch", type=int, required=True, help="epoch of the row")
    p.add_argument("--outcomes", required=True, help="self-play outcome counts (outcomes.tsv)")
    p.add_argument("--samples", required=True, help="training samples (samples.parquet)")
    p.add_argument("--loss", required=True, help="training log (loss.tsv)")
    p.add_argument("--eval-games", required=True, help="the epoch's eval/games.tsv")
    # nargs "?": the rule writes `--reasoning` with no file in a run without reasoning tasks.
    p.add_argument(
        "--reasoning",
        nargs="?",
        help="the epoch model's reasoning JSON (none: a run without reasoning tasks)",
    )
    p.add_argument("--selfplay", nargs="+", required=True, help="self-play shard files")
    p.add_argument(
        "--selfplay-benchmarks",
        nargs="*",
        default=[],
        help="Snakemake benchmark files of the self-play shards (time for tokens/s "
        "when the shards do not record it)",
    )
    p.add_argument("--output", required=True, help="summary TSV (one row)")
    p.add_argument("--game", default=GameSettings.name, help="the game (config game.name)")
    # Set by the workflow through the environment (spag.ops.tracking), like spag train's.
    p.add_argument(
        "--report-to",
        default=os.environ.get(ENV_REPORT_TO, "none"),
        help=f"trackers to log the row to, epoch as step (environment: {ENV_REPORT_TO})",
    )
    p.add_argument(
        "--tracking-dir",
        default=os.environ.get(ENV_TRACKING_DIR, DEFAULT_DIR),
        help=f"the trackers' folder (environment: {ENV_TRACKING_DIR})",
    )
    p.add_argument(
        "--project",
        default=os.environ.get(ENV_PROJECT) or folder_name(),
        help=f"the trackers' project (environment: {ENV_PROJECT}; default: this folder's name)",
    )
    p.add_argument(
        "--run-name",
        default=os.environ.get(ENV_RUN_NAME) or folder_name(),
        help=f"the run's name in the trackers (environment: {ENV_RUN_NAME})",
    )


def run(args: argparse.Namespace) -> int:
    from spag.game.base import load_game
    from spag.ops.tracking import log_loop_figures, parse_report_to
    from spag.report.summary import epoch_summary, write_summary

    game = load_game(args.game)
    row = epoch_summary(
        args.epoch,
        outcomes=args.outcomes,
        samples=args.samples,
        loss=args.loss,
        eval_games=args.eval_games,
        reasoning=args.reasoning,
        selfplay=args.selfplay,
        selfplay_benchmarks=args.selfplay_benchmarks,
        game=game,
    )
    write_summary(row, args.output, game)
    if row["roles_untrained"] != "-":
        log.warning(
            "epoch %d: no game samples of %s with a weight above 0: self-play trained no "
            "move of that role this epoch (only the objective's other terms reached it)",
            args.epoch,
            row["roles_untrained"],
        )
    trackers = parse_report_to(args.report_to)
    if trackers:
        logged = log_loop_figures(
            row, args.epoch, trackers, args.tracking_dir, args.project, args.run_name
        )
        log.info("epoch %d figures logged to %s", args.epoch, ", ".join(logged) or "no tracker")
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
