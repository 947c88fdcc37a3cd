"""``spag assign-rewards``: judge episodes, assign rewards, mix in SFT rows."""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--episodes", required=True, help="episodes Parquet (raw or judged)")
    p.add_argument("--output", required=True, help="samples Parquet to write")
    p.add_argument("--sft-data", default=None, help="instruction Parquet (query, target) to append")
    p.add_argument("--decay-weight", type=float, default=0.8, help="reward decay (default 0.8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the randomised prompts")
    p.add_argument("--prompts", default=None, help="prompts YAML (default: the shipped one)")


def run(args: argparse.Namespace) -> int:
    from spag.data.tables import read_parquet, write_parquet
    from spag.game.prompts import load_prompts
    from spag.game.rewards import assign_rewards

    prompts = load_prompts(args.prompts)
    episodes = read_parquet(args.episodes, what="episodes")
    sft = read_parquet(args.sft_data, what="SFT data") if args.sft_data else None
    samples = assign_rewards(
        episodes,
        decay=args.decay_weight,
        seed=args.seed,
        prompts=prompts,
        sft=sft,
        source=str(args.episodes),
        sft_source=str(args.sft_data),
    )
    write_parquet(samples, args.output)
    n_game = samples.num_rows - (sft.num_rows if sft is not None else 0)
    log.info(
        "%s: %d samples (%d from games, %d SFT) from %d episodes",
        args.output,
        samples.num_rows,
        n_game,
        samples.num_rows - n_game,
        episodes.num_rows,
    )
    return 0
