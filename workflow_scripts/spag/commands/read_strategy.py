"""``spag read-strategy``: a model's exact strategy in a solved game (Kuhn Poker).

One row per information set: the model's probability of each legal move, read from
its own probabilities with the prompt rendered as in play, and the mass outside the
legal moves (:mod:`spag.evaluation.strategy`). A scoring pass: nothing is generated.
"""

from __future__ import annotations

import argparse

from spag.game.settings import GameSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model folder")
    p.add_argument("--output", required=True, help="strategy TSV to write")
    p.add_argument("--game", default="kuhn_poker", help="a solved game (config game.name)")
    p.add_argument("--prompts", default=None, help="the game's prompts file (config game.prompts)")
    p.add_argument("--max-turns", type=int, default=GameSettings.max_turns)
    p.add_argument("--prompt-format", default=GameSettings.prompt_format)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--trust-remote-code", action="store_true")


def run(args: argparse.Namespace) -> int:
    import logging

    from spag.errors import SpagInputError
    from spag.evaluation.strategy import (
        STRATEGY_COLUMNS,
        load_strategy,
        read_strategy,
        strategy_metrics,
        write_tsv,
    )
    from spag.game.base import load_game
    from spag.ops.device import select_device

    game = load_game(args.game)
    if game.infosets is None:
        raise SpagInputError(f"--game {args.game}: not a solved game (no information sets)")
    device = select_device(args.device, "spag read-strategy")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    rows = read_strategy(
        args.model,
        game,
        game.load_prompts(args.prompts),
        prompt_format=args.prompt_format,
        max_turns=args.max_turns,
        dtype=args.dtype,
        device=device,
        trust_remote_code=args.trust_remote_code,
    )
    write_tsv(rows, STRATEGY_COLUMNS, args.output)
    strategy, illegal = load_strategy(args.output)
    m = strategy_metrics(strategy)
    logging.getLogger("spag.read_strategy").info(
        "%s: exploitability %.4f, chips/hand vs random %+.4f, vs equilibrium %+.4f, "
        "mass outside legal moves %.3f",
        args.output, m["exploitability"], m["ev_vs_random"], m["ev_vs_equilibrium"], illegal,
    )  # fmt: skip
    return 0
