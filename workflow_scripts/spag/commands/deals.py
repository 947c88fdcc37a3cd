"""``spag deals``: the secrets of a game that deals them itself (Kuhn Poker's six
deals), written as the run's training and held-out lists: self-play and evaluation
play every deal, ``selfplay.games_per_secret`` times per epoch in self-play."""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--game", required=True, help="the game (config game.name)")
    p.add_argument(
        "--game-settings",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="the game's own settings (config game.settings; lists comma-separated)",
    )
    p.add_argument("--output-train", required=True, help="self-play secrets to write")
    p.add_argument("--output-test", required=True, help="evaluation secrets to write")


def run(args: argparse.Namespace) -> int:
    from spag.data.words import write_word_list
    from spag.errors import SpagInputError
    from spag.game.base import load_game
    from spag.settings import from_words

    game = load_game(args.game)
    if args.game_settings:
        if game.settings is None:
            raise SpagInputError(f"--game-settings: {game.name} has no settings")
        game = game.with_settings(from_words(game.settings, args.game_settings, "--game-settings"))
    if game.deals is None:
        raise SpagInputError(f"--game {args.game}: its secrets come from a word source")
    for path in (args.output_train, args.output_test):
        write_word_list([game.check_secret(s, f"{game.name}'s deals") for s in game.deals], path)
    log.info("wrote the %d deals of %s to %s and %s", len(game.deals), game.name,
             args.output_train, args.output_test)  # fmt: skip
    return 0
