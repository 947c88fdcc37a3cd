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
import sys
import time
from pathlib import Path

from spag.game.play_settings import PlayConfig
from spag.ops.device import select_device
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
        OPPONENT,
        POLICY,
        evaluation_specs,
        games_table,
        play_games,
        selfplay_specs,
        shard_seed,
    )
    from spag.generation import load_backend

    game = load_game(c.game)
    words = shard_words(read_word_list(c.words), c.shard_index, c.num_shards)
    prompts = game.load_prompts(c.prompts)
    seed = shard_seed(c.seed, c.epoch, c.shard_index)
    sampling = c.sampling
    if c.opponent:
        specs = evaluation_specs(words, c.epoch, c.shard_index, game, c.games_per_word)
    else:
        specs = selfplay_specs(words, c.epoch, c.shard_index, c.games_per_word)
    from spag.generation.openai_backend import is_endpoint_spec, parse_spec

    endpoint = is_endpoint_spec(c.opponent)
    model_endpoint = is_endpoint_spec(c.model)
    default = parse_spec(c.model).model if model_endpoint else default_model_name(c.model)
    names = {POLICY: c.model_name or default}
    if c.opponent:
        default = parse_spec(c.opponent).model if endpoint else default_model_name(c.opponent)
        names[OPPONENT] = c.opponent_name or default
    log.info(
        "shard %d/%d: %d words, %d games, seed %d, backend %s, %s",
        c.shard_index,
        c.num_shards,
        len(words),
        len(specs),
        seed,
        "openai (endpoint)" if model_endpoint else c.backend,
        "greedy"
        if sampling.greedy
        else f"temperature {c.temperature}, top-k {c.top_k}, top-p {c.top_p}",
    )

    journal, done = None, {}
    if not c.no_journal:
        from spag.ops.journal import GameJournal, journal_path

        journal = GameJournal(journal_path(c.output), _journal_key(args, words))
        done = journal.load()
        if done:
            log.info(
                "resuming: %d of %d games were finished (%s)", len(done), len(specs), journal.path
            )
    remaining = [s for s in specs if s.episode_id not in done]

    if c.threads is not None:
        import torch

        torch.set_num_threads(c.threads)
        log.info("torch threads: %d", c.threads)
    backends = {}
    if remaining:
        # Two engines share the GPU in evaluation games.
        local_engines = (not model_endpoint) + bool(c.opponent and not endpoint)
        # Before a model is loaded: a GPU job without working CUDA stops here.
        # vLLM's engine process takes the GPU: nothing here may initialise CUDA before
        # it starts (probe=False checks by NVML; see spag.ops.device.cuda_problem).
        device = (
            select_device(
                c.device,
                "spag play",
                probe=c.backend != "vllm",
                gpus=c.tensor_parallel_size if c.backend == "vllm" else 1,
            )
            if local_engines
            else None
        )
        if c.opponent_gpu_memory_utilization is None:
            share = opponent_share = c.gpu_memory_utilization / max(local_engines, 1)
        else:
            share, opponent_share = (
                c.gpu_memory_utilization,
                c.opponent_gpu_memory_utilization,
            )
        # What each backend takes; load_backend refuses anything else.
        opts = dict(
            batch_size=c.batch_size,
            max_length=c.max_length,
            dtype=c.dtype,
            prompt_format=c.prompt_format,
            trust_remote_code=c.trust_remote_code,
        )
        if c.backend == "hf":
            opts.update(
                device=device,
                reuse_kv_bytes=int(c.kv_reuse_gib * 1024**3),
                cuda_graphs=c.cuda_graphs,
                batch_memory_bytes=(
                    int(c.batch_memory_gib * 1024**3) if c.batch_memory_gib else None
                ),
            )
        else:
            opts.update(
                tensor_parallel_size=c.tensor_parallel_size,
                gpu_memory_utilization=share,
                seed=seed,
                batch_invariant=c.vllm_batch_invariant,
            )
        backends[POLICY] = (
            load_backend("openai", c.model)
            if model_endpoint
            else load_backend(c.backend, c.model, **opts)
        )
        if endpoint:
            # An OpenAI-compatible server (e.g. the paper's GPT-4 games) as the fixed opponent.
            backends[OPPONENT] = load_backend("openai", c.opponent)
        elif c.opponent:
            same = not model_endpoint and Path(c.opponent).resolve() == Path(c.model).resolve()
            if c.backend == "vllm":
                opts["gpu_memory_utilization"] = opponent_share
            backends[OPPONENT] = (
                backends[POLICY] if same else load_backend(c.backend, c.opponent, **opts)
            )
        from spag.generation.base import check_moves_fit

        for key, backend in backends.items():
            tokenizer = getattr(backend, "tokenizer", None)  # an endpoint's is not here
            if tokenizer is not None:
                check_moves_fit(game, tokenizer, sampling.min_new_tokens, names[key])

    started = time.perf_counter()
    bar = _progress_bar(len(specs), disabled=c.no_progress)
    tokens = 0

    def progress(finished: int, new_tokens: int) -> None:
        nonlocal tokens
        tokens += new_tokens
        rate = tokens / max(time.perf_counter() - started, 1e-9)
        bar.set_postfix_str(f"{rate:.0f} tokens/s", refresh=False)
        bar.update(finished)

    games = (
        play_games(
            specs,
            backends,
            prompts,
            seed=seed,
            max_turns=c.max_turns,
            sampling=sampling,
            progress=progress,
            done=done,
            on_finished=journal.append if journal else None,
            game=game,
        )
        if specs
        else []
    )
    bar.close()
    logged: set[int] = set()
    for key, backend in backends.items():
        stats = getattr(backend, "stats", None)
        if stats and id(backend) not in logged:
            logged.add(id(backend))
            log.info(
                "%s model: %d prompt tokens, %d run through it (the rest from kept "
                "keys/values), %d rows x decoding steps, %d of them making a token",
                key,
                stats["prompt_tokens"],
                stats["prompt_tokens_computed"],
                stats["decode_row_steps"],
                stats["decode_tokens"],
            )
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
    elapsed = time.perf_counter() - started
    log.info(
        "wrote %s: %d episodes, %d generated tokens in %.1f s (%.0f tokens/s, %.2f episodes/s)",
        c.output,
        len(games),
        tokens,
        elapsed,
        tokens / max(elapsed, 1e-9),
        len(games) / max(elapsed, 1e-9),
    )
    return 0


# Flags that do not decide a shard's games: a journal written under other values of
# these still holds games of this shard.
_NOT_IN_JOURNAL_KEY = {"output", "threads", "no_progress", "no_journal", "verbose", "device"}


def _journal_key(args: argparse.Namespace, words: list[str]) -> str:
    """What decides the shard's games: the flags, its words, the prompts and the models.

    Built from the parsed command line, flag by flag, so that a journal left by an
    earlier job with the same flags resumes; a flag at its default is left out, so that
    one added by an upgrade (at its default) keeps the key of a killed shard's journal."""
    import hashlib

    from spag.game.base import load_game
    from spag.generation.openai_backend import is_endpoint_spec
    from spag.ops.journal import fingerprint
    from spag.settings import off_default
    from spag.training.scoring import model_identity

    parts = off_default(
        PlayConfig,
        {
            k: v
            for k, v in sorted(vars(args).items())
            if not k.startswith("_") and k not in _NOT_IN_JOURNAL_KEY
        },
    )
    parts["words"] = words
    prompts = Path(args.prompts or load_game(args.game).default_prompts_path())
    parts["prompts_sha256"] = hashlib.sha256(prompts.read_bytes()).hexdigest()
    for key in ("model", "opponent"):
        value = getattr(args, key)
        if value and not is_endpoint_spec(value):
            parts[f"{key}_identity"] = model_identity(value)
    return fingerprint(parts)


def _progress_bar(total: int, disabled: bool):
    from tqdm import tqdm

    # In a log file (not a terminal) print a line now and then instead of redrawing.
    tty = sys.stderr.isatty()
    return tqdm(
        total=total,
        desc="games",
        unit="game",
        file=sys.stderr,
        disable=disabled,
        mininterval=0.5 if tty else 10.0,
        ascii=not tty,
        dynamic_ncols=tty,
    )
