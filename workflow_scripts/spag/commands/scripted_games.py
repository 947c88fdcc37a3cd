"""``spag scripted-games``: the game's scripted player in every seat, for each secret
of a list (``data.imitation: scripted``; :mod:`spag.game.scripted`)."""

from __future__ import annotations

import argparse

from spag.game.settings import GameSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--words", required=True, help="the secrets to deal, one a line")
    p.add_argument("--output", required=True, help="episodes Parquet to write")
    p.add_argument("--games-per-word", type=int, required=True, help="games per secret")
    p.add_argument("--seed", type=int, required=True, help="seed of the scripted moves")
    p.add_argument("--max-turns", type=int, default=GameSettings.max_turns)
    p.add_argument("--game", default=GameSettings.name, help="the game (config game.name)")


def run(args: argparse.Namespace) -> int:
    import logging

    from spag.data.tables import write_parquet
    from spag.data.words import read_word_list
    from spag.errors import SpagInputError
    from spag.game.base import load_game
    from spag.game.scripted import scripted_games

    if args.games_per_word < 1:
        raise SpagInputError(f"--games-per-word must be at least 1, got {args.games_per_word}")
    game = load_game(args.game)
    table = scripted_games(
        game, read_word_list(args.words, game.check_secret), args.games_per_word, args.seed,
        args.max_turns,
    )  # fmt: skip
    write_parquet(table, args.output)
    logging.getLogger("spag.scripted_games").info("%s: %d games", args.output, table.num_rows)
    return 0
