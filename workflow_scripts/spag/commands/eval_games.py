"""``spag eval-games``: win / loss / tie table of the evaluation games of one epoch.

``attacker_broke_rules`` counts as a loss when the evaluated model attacked and
as a win when it defended (see :mod:`spag.eval_table`).
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--episodes", required=True, help="evaluation games (spag play --opponent), raw or merged"
    )
    p.add_argument("--output", required=True, help="TSV table to write")
    p.add_argument(
        "--epoch", type=int, default=None, help="epoch column (default: the episodes' epoch)"
    )
    p.add_argument(
        "--model-name",
        default=None,
        help="evaluated model's name (default: the name recorded in the episodes)",
    )


def run(args: argparse.Namespace) -> int:
    import logging

    from spag.eval_table import evaluation_table

    counts = evaluation_table(
        args.episodes, args.output, epoch=args.epoch, model_name=args.model_name
    )
    c = counts["all"]
    logging.getLogger("spag.eval_games").info(
        "%s: %d games, %d wins, %d losses, %d ties",
        args.output,
        c["games"],
        c["wins"],
        c["losses"],
        c["ties"],
    )
    return 0
