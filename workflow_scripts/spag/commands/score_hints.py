"""``spag score-hints``: graded hints of one model's evaluation games.

A fixed listener ranks each game's secret among ``--k`` held-out words after every
attacker message (:mod:`spag.evaluation.hints`); one row per attacker message.
"""

from __future__ import annotations

import argparse

from spag.game.settings import GameSettings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listener", required=True, help="model folder that reads the hints")
    p.add_argument(
        "--episodes",
        required=True,
        nargs="+",
        help="dialogues: evaluation games (merged Parquet) or demonstration games (Parquet"
        " or the research code's JSON)",
    )
    p.add_argument(
        "--sources",
        nargs="+",
        default=None,
        help="a name per --episodes file (default: eval)",
    )
    p.add_argument(
        "--unique-dialogues",
        action="store_true",
        help="read each dialogue (secret and messages) once per source: against M0 as the"
        " opponent, M0's attacker and defender games are the same dialogues",
    )
    p.add_argument("--words", required=True, help="held-out words: the distractors' pool")
    p.add_argument("--output", required=True, help="hint ranks Parquet to write")
    p.add_argument("--k", type=int, required=True, help="distractors per game")
    p.add_argument("--seed", type=int, required=True, help="seed of the distractors")
    p.add_argument("--game", default=GameSettings.name, help="the game (config game.name)")
    p.add_argument("--prompts", default=None, help="the game's prompts file")
    p.add_argument("--prompt-format", default=GameSettings.prompt_format)
    p.add_argument("--dtype", required=True)
    p.add_argument("--device", required=True)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--trust-remote-code", action="store_true")


def run(args: argparse.Namespace) -> int:
    import logging
    import time

    from spag.data.tables import write_parquet
    from spag.data.words import read_word_list
    from spag.errors import SpagInputError
    from spag.evaluation.hints import Listener, hint_ranks, summarize_hints, unique_dialogues
    from spag.game.base import load_game
    from spag.ops.device import select_device

    game = load_game(args.game)
    if game.guess_text is None:
        raise SpagInputError(f"--game {args.game}: the game has no guess to grade hints by")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from spag.data.imitation import load_imitation_input

    sources = args.sources or ["eval"] * len(args.episodes)
    if len(sources) != len(args.episodes):
        raise SpagInputError(f"--sources names {len(sources)} of {len(args.episodes)} --episodes")
    dialogues = []
    for path, source in zip(args.episodes, sources, strict=True):
        games, _ = load_imitation_input(path)
        if games is None:  # instruction data as the demonstrations: no dialogue to read
            logging.getLogger("spag.score_hints").warning("%s: no games, skipped", path)
            continue
        episodes = games.to_pylist()
        dialogues.append(
            (source, unique_dialogues(episodes) if args.unique_dialogues else episodes)
        )
    if not dialogues:
        raise SpagInputError(f"no games in {', '.join(args.episodes)}")
    words = read_word_list(args.words)
    started = time.perf_counter()
    listener = Listener(
        args.listener,
        prompt_format=args.prompt_format,
        dtype=args.dtype,
        device=select_device(args.device, "spag score-hints"),
        trust_remote_code=args.trust_remote_code,
    )
    import pyarrow as pa

    prompts = game.load_prompts(args.prompts)
    table = pa.concat_tables(
        hint_ranks(listener, game, prompts, eps, words, k=args.k, seed=args.seed, source=source)
        for source, eps in dialogues
    )
    write_parquet(table, args.output)
    elapsed = time.perf_counter() - started
    everyone = summarize_hints(table, "model")[-1]
    raw = summarize_hints(table, "model", rank="raw")[-1]
    logging.getLogger("spag.score_hints").info(
        "%s: %d games, %d attacker messages in %.1f s (%.1f s per 1,000 games); "
        "MRR after the best message %.3f calibrated, %.3f raw; top-1 %.3f, %.3f",
        args.output, everyone["games"], table.num_rows, elapsed,
        1000 * elapsed / max(everyone["games"], 1), everyone["mrr_best"], raw["mrr_best"],
        everyone["top1_best"], raw["top1_best"],
    )  # fmt: skip
    return 0
