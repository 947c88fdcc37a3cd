"""``spag play``: play Adversarial Taboo games for one shard of target words.

Without ``--opponent`` the model plays itself (sampling, temperature 1.2); with
it, the model plays both roles against the opponent, greedily (evaluation).
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

from spag.device import DEVICES, select_device
from spag.errors import SpagInputError
from spag.game.rendering import PROMPT_FORMATS
from spag.generation.base import DEFAULT_TOP_K
from spag.generation.registry import MODEL_BACKENDS

log = logging.getLogger("spag.play")

# Comma-separated shard indices that fail on purpose (tests of retries and reruns).


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        required=True,
        help="model folder (Hugging Face checkpoint), or an OpenAI-compatible endpoint "
        "'openai:http://host:port/v1?model=NAME' (e.g. a teacher playing demonstrations)",
    )
    p.add_argument("--words", required=True, help="target words, one a line")
    p.add_argument("--output", required=True, help="shard Parquet file to write")
    p.add_argument(
        "--opponent",
        help="opponent model folder, or an OpenAI-compatible endpoint "
        "'openai:http://host:port/v1?model=NAME': play evaluation games against it",
    )
    p.add_argument("--shard-index", type=int, default=0, help="this job's shard (default 0)")
    p.add_argument("--num-shards", type=int, default=1, help="number of shards (default 1)")
    p.add_argument("--backend", choices=MODEL_BACKENDS, default="hf", help="default hf")
    p.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    p.add_argument(
        "--epoch",
        type=int,
        default=0,
        help="epoch: part of the shard seed and of episode ids (default 0)",
    )
    p.add_argument("--max-turns", type=int, default=5, help="turns per player (default 5)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="per reply (default 256)")
    p.add_argument(
        "--max-length",
        type=int,
        default=None,
        help="prompt + reply token budget; longer prompts are left-truncated "
        "(default 2048, capped by the model's context)",
    )
    p.add_argument("--temperature", type=float, default=1.2, help="default 1.2")
    p.add_argument("--top-p", type=float, default=1.0, help="default 1.0")
    p.add_argument(
        "--top-k",
        type=int,
        default=DEFAULT_TOP_K,
        help=f"sample from the k most likely tokens; 0: no limit (default {DEFAULT_TOP_K}, "
        "as the research code)",
    )
    p.add_argument(
        "--prompt-format",
        choices=PROMPT_FORMATS,
        default="raw",
        help="raw: the prompt text as it is (paper); chat: through the tokenizer's chat "
        "template (default raw)",
    )
    p.add_argument(
        "--greedy",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="greedy decoding (default: on with --opponent, off in self-play)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="hf: sequences per generate call (default 64); vllm: max_num_seqs (default vLLM's)",
    )
    p.add_argument(
        "--games-per-word", type=int, default=1, help="self-play games per target word (default 1)"
    )
    p.add_argument(
        "--prompts", default=None, help="prompts YAML (default: the shipped data/prompts.yaml)"
    )
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="vllm (default 1)")
    p.add_argument(
        "--batch-memory-gib",
        type=float,
        default=None,
        help="hf: memory one sub-batch may take (static KV cache and prompt pass); the "
        "batch is split to fit (default: 80%% of free GPU memory, or half the available "
        "memory on CPU)",
    )
    p.add_argument(
        "--kv-reuse-gib",
        type=float,
        default=2.0,
        help="hf: memory for keys/values kept between a game's turns, so that the next "
        "prompt computes only its new tokens (default 2 GiB; 0 turns reuse off)",
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="vllm: share of the GPU's total memory for the model's engine (default 0.9; "
        "with a local --opponent and no --opponent-gpu-memory-utilization, half each)",
    )
    p.add_argument(
        "--opponent-gpu-memory-utilization",
        type=float,
        default=None,
        help="vllm: share of the GPU's total memory for the opponent's engine",
    )
    p.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
        default="auto",
        help="default auto (float32 on CPU)",
    )
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow model code from the model folder (off by default)",
    )
    p.add_argument(
        "--model-name",
        default=None,
        help="name recorded in the episodes (default: the folder name)",
    )
    p.add_argument(
        "--opponent-name",
        default=None,
        help="opponent name recorded in the episodes (default: the folder name)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice; set it to the job's cores)",
    )
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="cuda: stop at once without working CUDA; cpu; auto: CUDA where it works",
    )
    p.add_argument(
        "--no-journal",
        action="store_true",
        help="do not journal finished games beside the output (by default a failed or "
        "killed shard resumes from its finished games)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def default_model_name(path: str | os.PathLike) -> str:
    """The folder name; for a generic ``.../epoch3/model`` the last two parts."""
    p = Path(path).resolve()
    if p.name in ("model", "checkpoint", "final") and p.parent.name:
        return f"{p.parent.name}/{p.name}"
    return p.name


def _check_args(args: argparse.Namespace) -> None:
    if args.num_shards < 1:
        raise SpagInputError(f"--num-shards must be at least 1, got {args.num_shards}")
    if not 0 <= args.shard_index < args.num_shards:
        raise SpagInputError(
            f"--shard-index {args.shard_index} is out of range for --num-shards {args.num_shards}"
            f" (valid: 0..{args.num_shards - 1})"
        )
    if args.max_turns < 1:
        raise SpagInputError(f"--max-turns must be at least 1, got {args.max_turns}")
    if args.max_new_tokens < 1:
        raise SpagInputError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if args.temperature < 0:
        raise SpagInputError(f"--temperature must be >= 0, got {args.temperature}")
    if args.top_k < 0:
        raise SpagInputError(f"--top-k must be >= 0 (0: no limit), got {args.top_k}")
    if not 0 < args.top_p <= 1:
        raise SpagInputError(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.batch_size is not None and args.batch_size < 1:
        raise SpagInputError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.games_per_word < 1:
        raise SpagInputError(f"--games-per-word must be at least 1, got {args.games_per_word}")
    if args.batch_memory_gib is not None and args.batch_memory_gib <= 0:
        raise SpagInputError(f"--batch-memory-gib must be positive, got {args.batch_memory_gib}")
    if args.kv_reuse_gib < 0:
        raise SpagInputError(f"--kv-reuse-gib must be >= 0, got {args.kv_reuse_gib}")
    if args.threads is not None and args.threads < 1:
        raise SpagInputError(f"--threads must be at least 1, got {args.threads}")
    if args.opponent and args.games_per_word != 1:
        raise SpagInputError("--games-per-word applies to self-play only (not with --opponent)")


def run(args: argparse.Namespace) -> int:
    _check_args(args)

    from spag.data.tables import write_parquet
    from spag.data.words import read_word_list, shard_words
    from spag.game.prompts import load_prompts
    from spag.game.selfplay import (
        OPPONENT,
        POLICY,
        PlaySettings,
        evaluation_specs,
        games_table,
        play_games,
        selfplay_specs,
        shard_seed,
    )
    from spag.generation import load_backend

    words = shard_words(read_word_list(args.words), args.shard_index, args.num_shards)
    prompts = load_prompts(args.prompts)
    seed = shard_seed(args.seed, args.epoch, args.shard_index)
    greedy = args.greedy if args.greedy is not None else args.opponent is not None
    settings = PlaySettings(
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        greedy=greedy,
        seed=seed,
    )
    if args.opponent:
        specs = evaluation_specs(words, args.epoch, args.shard_index)
    else:
        specs = selfplay_specs(words, args.epoch, args.shard_index, args.games_per_word)
    from spag.generation.openai_backend import is_endpoint_spec, parse_spec

    endpoint = is_endpoint_spec(args.opponent)
    model_endpoint = is_endpoint_spec(args.model)
    default = parse_spec(args.model).model if model_endpoint else default_model_name(args.model)
    names = {POLICY: args.model_name or default}
    if args.opponent:
        default = parse_spec(args.opponent).model if endpoint else default_model_name(args.opponent)
        names[OPPONENT] = args.opponent_name or default
    log.info(
        "shard %d/%d: %d words, %d games, seed %d, backend %s, %s",
        args.shard_index,
        args.num_shards,
        len(words),
        len(specs),
        seed,
        "openai (endpoint)" if model_endpoint else args.backend,
        "greedy"
        if greedy
        else f"temperature {args.temperature}, top-k {args.top_k}, top-p {args.top_p}",
    )

    journal, done = None, {}
    if not args.no_journal:
        from spag.game.journal import GameJournal, journal_path

        journal = GameJournal(journal_path(args.output), _journal_key(args, words))
        done = journal.load()
        if done:
            log.info(
                "resuming: %d of %d games were finished (%s)", len(done), len(specs), journal.path
            )
    remaining = [s for s in specs if s.episode_id not in done]

    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
        log.info("torch threads: %d", args.threads)
    backends = {}
    if remaining:
        # Two engines share the GPU in evaluation games.
        local_engines = (not model_endpoint) + bool(args.opponent and not endpoint)
        # Before a model is loaded: a GPU job without working CUDA stops here.
        # vLLM's workers take the GPU: no CUDA context in this process before them.
        device = (
            select_device(args.device, "spag play", probe=args.backend != "vllm")
            if local_engines
            else None
        )
        if args.opponent_gpu_memory_utilization is None:
            share = opponent_share = args.gpu_memory_utilization / max(local_engines, 1)
        else:
            share, opponent_share = (
                args.gpu_memory_utilization,
                args.opponent_gpu_memory_utilization,
            )
        # What each backend takes; load_backend refuses anything else.
        opts = dict(
            batch_size=args.batch_size,
            max_length=args.max_length,
            dtype=args.dtype,
            prompt_format=args.prompt_format,
            trust_remote_code=args.trust_remote_code,
        )
        if args.backend == "hf":
            opts.update(
                device=device,
                reuse_kv_bytes=int(args.kv_reuse_gib * 1024**3),
                batch_memory_bytes=(
                    int(args.batch_memory_gib * 1024**3) if args.batch_memory_gib else None
                ),
            )
        else:
            opts.update(
                tensor_parallel_size=args.tensor_parallel_size,
                gpu_memory_utilization=share,
                seed=seed,
            )
        backends[POLICY] = (
            load_backend("openai", args.model)
            if model_endpoint
            else load_backend(args.backend, args.model, **opts)
        )
        if endpoint:
            # An OpenAI-compatible server (e.g. the paper's GPT-4 games) as the fixed opponent.
            backends[OPPONENT] = load_backend("openai", args.opponent)
        elif args.opponent:
            same = (
                not model_endpoint and Path(args.opponent).resolve() == Path(args.model).resolve()
            )
            if args.backend == "vllm":
                opts["gpu_memory_utilization"] = opponent_share
            backends[OPPONENT] = (
                backends[POLICY] if same else load_backend(args.backend, args.opponent, **opts)
            )

    started = time.perf_counter()
    bar = _progress_bar(len(specs), disabled=args.no_progress)
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
            settings,
            progress,
            done=done,
            on_finished=journal.append if journal else None,
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
                "keys/values), %d rows x decoding steps",
                key,
                stats["prompt_tokens"],
                stats["prompt_tokens_computed"],
                stats["decode_row_steps"],
            )
    table = games_table(
        games,
        max_turns=args.max_turns,
        epoch=args.epoch,
        shard=args.shard_index,
        seed=seed,
        model_names=names,
    )
    write_parquet(table, args.output)
    if journal is not None:
        journal.remove()
    elapsed = time.perf_counter() - started
    log.info(
        "wrote %s: %d episodes, %d generated tokens in %.1f s (%.0f tokens/s, %.2f episodes/s)",
        args.output,
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
    """What decides the shard's games: the flags, its words, the prompts and the models."""
    import hashlib

    from spag.game.journal import fingerprint
    from spag.game.prompts import default_prompts_path
    from spag.generation.openai_backend import is_endpoint_spec
    from spag.training.scoring import model_identity

    parts = {
        k: v
        for k, v in sorted(vars(args).items())
        if not k.startswith("_") and k not in _NOT_IN_JOURNAL_KEY
    }
    parts["words"] = words
    prompts = Path(args.prompts) if args.prompts else default_prompts_path()
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
