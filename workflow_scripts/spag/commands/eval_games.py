"""``spag eval-games``: win / loss / tie table of one model's evaluation games.

A game is a win, loss or tie by the sign of the evaluated model's result (in Taboo
``attacker_broke_rules`` counts as a loss when the evaluated model attacked and as a
win when it defended; see :mod:`spag.evaluation.games`). Every rate comes with its
95% Wilson score interval.
"""

from __future__ import annotations

import argparse

from spag.game.settings import GameSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--episodes", required=True, help="evaluation games (spag play --opponent), raw or merged"
    )
    p.add_argument("--output", required=True, help="TSV table to write")
    p.add_argument(
        "--epoch",
        type=int,
        default=None,
        help="epoch column (default: the episodes' epoch; the workflow writes -1 for the base"
        " model and 0 for M0)",
    )
    p.add_argument(
        "--model-name",
        default=None,
        help="evaluated model's name (default: the name recorded in the episodes)",
    )
    p.add_argument("--game", default=GameSettings.name, help="the game (config game.name)")


def run(args: argparse.Namespace) -> int:
    import logging

    from spag.evaluation.games import evaluation_table, rates
    from spag.game.base import load_game

    counts = evaluation_table(
        args.episodes,
        args.output,
        epoch=args.epoch,
        model_name=args.model_name,
        game=load_game(args.game),
    )
    c = counts["all"]
    r = rates(c)
    logging.getLogger("spag.eval_games").info(
        "%s: %d games, %d wins, %d losses, %d ties; win rate %.3f [%.3f, %.3f]",
        args.output,
        c["games"],
        c["wins"],
        c["losses"],
        c["ties"],
        r["win_rate"],
        r["win_rate_lo"],
        r["win_rate_hi"],
    )
    return 0
