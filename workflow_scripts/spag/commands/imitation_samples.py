"""``spag imitation-samples``: imitation samples from demonstration games or instruction data."""

from __future__ import annotations

import argparse
import logging

from spag.game.imitation import IMITATE
from spag.game.scripted import ScriptedSettings
from spag.game.settings import GameSettings

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input",
        required=True,
        nargs="+",
        help="episodes Parquet, instruction Parquet (query, target), or a JSON file of "
        "games, instructions or Alpaca records; several files are concatenated",
    )
    p.add_argument("--output", required=True, help="samples Parquet to write")
    p.add_argument("--seed", type=int, default=0, help="seed of the randomised prompts")
    p.add_argument("--prompts", default=None, help="prompts YAML (default: the game's shipped one)")
    p.add_argument("--game", default=GameSettings.name, help="the game (config game.name)")
    p.add_argument(
        "--imitate",
        choices=tuple(IMITATE),
        default=ScriptedSettings.imitate,
        help="winners: the winner's messages of decisive games; every: every message of "
        "every game without a rule break (config data.scripted.imitate)",
    )
    p.add_argument(
        "--require-both-roles",
        metavar="KEY",
        default=None,
        help="refuse games won by only one role, naming KEY (the setting that played them)",
    )


def run(args: argparse.Namespace) -> int:
    from spag.data.imitation import load_imitation_inputs
    from spag.data.tables import write_parquet
    from spag.game.base import load_game
    from spag.game.imitation import imitation_samples

    game = load_game(args.game)
    games, instructions = load_imitation_inputs(args.input)
    names = ", ".join(args.input)
    samples = imitation_samples(
        games,
        instructions,
        seed=args.seed,
        prompts=game.load_prompts(args.prompts) if games is not None else None,
        source=names,
        instructions_source=names,
        both_roles_key=args.require_both_roles,
        game=game,
        imitate=args.imitate,
    )
    write_parquet(samples, args.output)
    log.info("%s: %d imitation samples from %s", args.output, samples.num_rows, names)
    return 0
