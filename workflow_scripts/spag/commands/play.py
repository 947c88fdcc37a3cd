"""``spag play``: play the game (``--game``, Adversarial Taboo by default) for one shard
of secrets (target words).

Without ``--opponent`` the model plays itself (sampling); with it, the model plays
both roles against the opponent, greedily (evaluation). The flags are the fields of
:class:`spag.game.play_settings.PlayConfig`.

The shard file is written atomically: a job killed at any moment leaves no file
at ``--output``.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from spag.game.play_settings import PlayConfig
from spag.generation.openai_backend import is_endpoint_spec
from spag.settings import add_arguments as add_setting_arguments
from spag.settings import from_arguments

log = logging.getLogger("spag.play")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``spag play``'s flags: one per field of :class:`PlayConfig`."""
    add_setting_arguments(p, PlayConfig)


def default_model_name(path: str | os.PathLike) -> str:
    """The folder name; for a generic ``.../epoch3/model`` the last two parts."""
    p = Path(path).resolve()
    if p.name in ("model", "checkpoint", "final") and p.parent.name:
        return f"{p.parent.name}/{p.name}"
    return p.name


def run(args: argparse.Namespace) -> int:
    c: PlayConfig = from_arguments(PlayConfig, args)

    from spag.data.tables import write_parquet
    from spag.data.words import read_word_list, shard_words
    from spag.game.base import load_game
    from spag.game.selfplay import (
        evaluation_specs,
        games_table,
        play_games,
        selfplay_specs,
        shard_seed,
    )
    from spag.ops.engines import load_play_engines, log_engine_stats
    from spag.ops.journal import open_play_journal
    from spag.ops.progress import GameProgress

    game = load_game(c.game)
    words = shard_words(read_word_list(c.words, game.check_secret), c.shard_index, c.num_shards)
    prompts = game.load_prompts(c.prompts)
    seed = shard_seed(c.seed, c.epoch, c.shard_index)
    if c.opponent:
        specs = evaluation_specs(words, c.epoch, c.shard_index, game, c.games_per_word)
    else:
        specs = selfplay_specs(words, c.epoch, c.shard_index, c.games_per_word)
    names = player_names(c)
    log.info(
        "shard %d/%d: %d words, %d games, seed %d, backend %s, %s",
        c.shard_index,
        c.num_shards,
        len(words),
        len(specs),
        seed,
        "openai (endpoint)" if is_endpoint_spec(c.model) else c.backend,
        "greedy"
        if c.sampling.greedy
        else f"temperature {c.temperature}, top-k {c.top_k}, top-p {c.top_p}",
    )
    journal, done = None, {}
    if not c.no_journal:
        journal, done = open_play_journal(args, words, c.output, len(specs))
    remaining = [s for s in specs if s.episode_id not in done]
    backends = load_play_engines(c, seed, game, names) if remaining else {}

    progress = GameProgress(len(specs), disabled=c.no_progress)
    games = (
        play_games(
            specs,
            backends,
            prompts,
            seed=seed,
            max_turns=c.max_turns,
            sampling=c.sampling,
            progress=progress,
            done=done,
            on_finished=journal.append if journal else None,
            game=game,
        )
        if specs
        else []
    )
    progress.close()
    log_engine_stats(backends)
    table = games_table(
        games,
        max_turns=c.max_turns,
        epoch=c.epoch,
        shard=c.shard_index,
        seed=seed,
        model_names=names,
        game=game,
    )
    write_parquet(table, c.output)
    if journal is not None:
        journal.remove()
    elapsed = progress.elapsed()
    log.info(
        "wrote %s: %d episodes, %d generated tokens in %.1f s (%.0f tokens/s, %.2f episodes/s)",
        c.output,
        len(games),
        progress.tokens,
        elapsed,
        progress.tokens / elapsed,
        len(games) / elapsed,
    )
    return 0


def player_names(c: PlayConfig) -> dict[str, str]:
    """The names the games table gives the players: the flags', else the endpoint's
    model or the model folder's name."""
    from spag.game.selfplay import OPPONENT, POLICY
    from spag.generation.openai_backend import parse_spec

    def default(spec: str) -> str:
        return parse_spec(spec).model if is_endpoint_spec(spec) else default_model_name(spec)

    names = {POLICY: c.model_name or default(c.model)}
    if c.opponent:
        names[OPPONENT] = c.opponent_name or default(c.opponent)
    return names
