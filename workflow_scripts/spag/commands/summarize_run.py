"""``spag summarize-run``: the run-wide summary tables (rule ``summary_tables``).

::

    spag summarize-run [--epoch-summaries SUMMARY.tsv [...] --output EPOCHS.tsv]
        [--reasoning [REASONING.json ...] --reasoning-output REASONING.tsv]
        [--eval-games GAMES.tsv [...] --eval-games-output EVAL_GAMES.tsv
         [--eval-episodes GAMES.parquet [...] [--paired-reference imitation]]]
        [--commit COMMIT] [--config-digest DIGEST]

``--epoch-summaries`` are the rows of ``spag summarize-epoch``, stacked by epoch
(rule ``sampled_games_table`` asks for the evaluation games table alone);
``--reasoning`` the reasoning JSON files of every model (base, imitation,
epoch<N>), turned into one long table (no file, in a run without reasoning tasks:
its header only); ``--eval-games`` the evaluation games
tables of every model, stacked into one table in run order, with each model's
paired difference from M0 (:mod:`spag.evaluation.paired`) when
``--eval-episodes`` gives the games themselves. Every table is
built before any is written: a bad input leaves no output.
"""

from __future__ import annotations

import argparse
import logging

from spag.game.settings import GameSettings

log = logging.getLogger("spag.summarize_run")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epoch-summaries", nargs="+", help="per-epoch summary files")
    p.add_argument("--output", help="summary TSV of all epochs")
    # nargs "*": the rule writes `--reasoning` with no file in a run without reasoning tasks.
    p.add_argument(
        "--reasoning",
        nargs="*",
        help="reasoning JSON files of all models (none: the table's header only)",
    )
    p.add_argument("--reasoning-output", help="long reasoning table TSV")
    p.add_argument("--eval-games", nargs="+", help="evaluation games tables of all models")
    p.add_argument("--eval-games-output", help="evaluation games table of all models TSV")
    p.add_argument(
        "--eval-episodes",
        nargs="+",
        help="evaluation games (parquet) of every model: each model's paired difference "
        "from --paired-reference on the same words and roles joins its rows",
    )
    p.add_argument(
        "--paired-reference",
        default="imitation",
        help="the model every other is compared with, pair by pair (default: imitation, M0)",
    )
    p.add_argument("--commit", help="the project's commit, a column of every table")
    p.add_argument("--config-digest", help="the config's digest, a column of every table")
    p.add_argument("--game", default=GameSettings.name, help="the game (config game.name)")


def run(args: argparse.Namespace) -> int:
    from spag.errors import SpagInputError
    from spag.game.base import load_game
    from spag.report.summary import (
        add_paired,
        collect_epochs,
        collect_eval_games,
        collect_reasoning,
        write_tsv,
    )

    if bool(args.epoch_summaries) != bool(args.output):
        raise SpagInputError("--epoch-summaries and --output go together")
    if not (args.epoch_summaries or args.reasoning is not None or args.eval_games):
        raise SpagInputError(
            "nothing to summarize: give --epoch-summaries, --reasoning or --eval-games"
        )
    if (args.reasoning is not None) != bool(args.reasoning_output):
        raise SpagInputError("--reasoning and --reasoning-output go together")
    if bool(args.eval_games) != bool(args.eval_games_output):
        raise SpagInputError("--eval-games and --eval-games-output go together")
    # What produced the numbers, on every row (results/run_info.json has the rest).
    stamp = {k: v for k, v in (("commit", args.commit), ("config_digest", args.config_digest)) if v}
    game = load_game(args.game)
    epochs = (
        collect_epochs(args.epoch_summaries, game).assign(**stamp) if args.epoch_summaries else None
    )
    reasoning = (
        collect_reasoning(args.reasoning).assign(**stamp) if args.reasoning is not None else None
    )
    if args.eval_episodes and not args.eval_games:
        raise SpagInputError("--eval-episodes needs --eval-games")
    games = collect_eval_games(args.eval_games, game) if args.eval_games else None
    if games is not None and args.eval_episodes:
        games = add_paired(games, args.eval_episodes, args.paired_reference, game=game)
    games = games.assign(**stamp) if games is not None else None
    if epochs is not None:
        write_tsv(epochs, args.output)
        log.info("wrote %s: %d epochs", args.output, len(epochs))
    if reasoning is not None:
        write_tsv(reasoning, args.reasoning_output)
        log.info("wrote %s: %d rows", args.reasoning_output, len(reasoning))
    if games is not None:
        write_tsv(games, args.eval_games_output)
        log.info("wrote %s: %d rows", args.eval_games_output, len(games))
    return 0
