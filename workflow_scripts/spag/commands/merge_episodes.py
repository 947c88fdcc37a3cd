"""``spag merge-episodes``: merge shard files, judge every game, count the outcomes."""

from __future__ import annotations

import argparse
import logging

from spag.game.settings import GameSettings

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", nargs="+", required=True, help="episode shard Parquet files")
    p.add_argument("--output", required=True, help="merged, judged episodes Parquet")
    p.add_argument(
        "--counts",
        default=None,
        help="TSV of the number of games per outcome (self-play and teacher games)",
    )
    p.add_argument("--epoch", type=int, default=None, help="epoch number, written to the TSV")
    p.add_argument("--game", default=GameSettings.name, help="the game (config game.name)")


def run(args: argparse.Namespace) -> int:
    from spag.data.tables import write_parquet
    from spag.game.base import load_game
    from spag.game.merge import merge_episode_files, write_counts

    merged, counts = merge_episode_files(args.inputs, load_game(args.game))
    write_parquet(merged, args.output)
    if args.counts:
        write_counts(counts, args.counts, epoch=args.epoch)
    log.info(
        "%s: %d episodes from %d shards: %s", args.output, merged.num_rows, len(args.inputs), counts
    )
    return 0
