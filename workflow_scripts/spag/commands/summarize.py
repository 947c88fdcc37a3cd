"""``spag summarize``: the summary row of one epoch, or the run-wide tables.

Epoch mode (the ``epoch_summary`` rule)::

    spag summarize --epoch E --outcomes OUTCOMES.tsv --samples SAMPLES.parquet
        --loss LOSS.tsv --eval-games GAMES.tsv --reasoning REASONING.json
        --selfplay SHARD.parquet [SHARD ...] [--selfplay-benchmarks TSV ...]
        --output SUMMARY.tsv

Collect mode (the ``summary_tables`` rule)::

    spag summarize --collect --epoch-summaries SUMMARY.tsv [...] --output EPOCHS.tsv
        [--reasoning REASONING.json [...] --reasoning-output REASONING.tsv]
        [--eval-games GAMES.tsv [...] --eval-games-output EVAL_GAMES.tsv]

In collect mode ``--eval-games`` takes the evaluation games tables of every
model (base, imitation, epoch<N>), stacked into one table in run order.
"""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger("spag.summarize")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--output",
        required=True,
        help="summary TSV (epoch mode: one row; collect mode: all epochs)",
    )
    p.add_argument("--epoch", type=int, help="epoch of the row (epoch mode)")
    p.add_argument("--outcomes", help="self-play outcome counts (outcomes.tsv)")
    p.add_argument("--samples", help="training samples (samples.parquet)")
    p.add_argument("--loss", help="training log (loss.tsv)")
    p.add_argument(
        "--eval-games",
        nargs="+",
        help="evaluation games table (epoch mode: the epoch's eval/games.tsv; "
        "collect mode: the tables of all models)",
    )
    p.add_argument(
        "--reasoning",
        nargs="+",
        help="reasoning JSON (epoch mode: the epoch's model; collect mode: all models)",
    )
    p.add_argument("--selfplay", nargs="+", default=[], help="self-play shard files")
    p.add_argument(
        "--selfplay-benchmarks",
        nargs="*",
        default=[],
        help="Snakemake benchmark files of the self-play shards (time for tokens/s "
        "when the shards do not record it)",
    )
    p.add_argument(
        "--collect",
        action="store_true",
        help="collect mode: stack per-epoch summaries and reasoning results",
    )
    p.add_argument(
        "--epoch-summaries", nargs="+", default=[], help="per-epoch summary files (collect mode)"
    )
    p.add_argument("--reasoning-output", help="long reasoning table TSV (collect mode)")
    p.add_argument(
        "--eval-games-output", help="evaluation games table of all models TSV (collect mode)"
    )


def run(args: argparse.Namespace) -> int:
    from spag.errors import SpagInputError
    from spag.summary import (
        collect_epochs,
        collect_eval_games,
        collect_reasoning,
        epoch_summary,
        write_summary,
        write_tsv,
    )

    if args.collect:
        if not args.epoch_summaries:
            raise SpagInputError("--collect needs --epoch-summaries")
        if bool(args.reasoning) != bool(args.reasoning_output):
            raise SpagInputError("--reasoning and --reasoning-output go together in --collect mode")
        if bool(args.eval_games) != bool(args.eval_games_output):
            raise SpagInputError(
                "--eval-games and --eval-games-output go together in --collect mode"
            )
        # Build every table before writing any: a bad input leaves no output.
        epochs = collect_epochs(args.epoch_summaries)
        reasoning = collect_reasoning(args.reasoning) if args.reasoning else None
        games = collect_eval_games(args.eval_games) if args.eval_games else None
        write_tsv(epochs, args.output)
        log.info("wrote %s: %d epochs", args.output, len(epochs))
        if reasoning is not None:
            write_tsv(reasoning, args.reasoning_output)
            log.info("wrote %s: %d rows", args.reasoning_output, len(reasoning))
        if games is not None:
            write_tsv(games, args.eval_games_output)
            log.info("wrote %s: %d rows", args.eval_games_output, len(games))
        return 0

    needed = ("epoch", "outcomes", "samples", "loss", "eval_games", "reasoning", "selfplay")
    missing = [n for n in needed if not getattr(args, n)]
    if missing:
        raise SpagInputError(
            "epoch mode needs " + ", ".join("--" + n.replace("_", "-") for n in missing)
        )
    if len(args.reasoning) != 1:
        raise SpagInputError("epoch mode takes one --reasoning file")
    if len(args.eval_games) != 1:
        raise SpagInputError("epoch mode takes one --eval-games file")
    row = epoch_summary(
        args.epoch,
        outcomes=args.outcomes,
        samples=args.samples,
        loss=args.loss,
        eval_games=args.eval_games[0],
        reasoning=args.reasoning[0],
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
