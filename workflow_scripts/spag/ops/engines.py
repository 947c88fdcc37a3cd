"""The engines of a ``spag play`` job: its settings turned into loaded backends.

Which device, how the GPU's memory is split between the policy and a local opponent,
what each backend takes (``load_backend`` refuses anything else), an endpoint for
either player, one engine for both roles when the opponent is the policy's own model,
and the check that the game's move replies fit the decoding minimum under each
model's tokenizer.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from spag.game.play_settings import PlayConfig
from spag.game.selfplay import OPPONENT, POLICY
from spag.ops.device import select_device

log = logging.getLogger("spag.play")


def load_play_engines(c: PlayConfig, seed: int, game: Any, names: dict[str, str]) -> dict[str, Any]:
    """The backends by role (``POLICY``, and ``OPPONENT`` with ``c.opponent``)."""
    from spag.generation import load_backend
    from spag.generation.base import check_moves_fit
    from spag.generation.openai_backend import is_endpoint_spec

    model_endpoint = is_endpoint_spec(c.model)
    endpoint = is_endpoint_spec(c.opponent)
    if c.threads is not None:
        import torch

        torch.set_num_threads(c.threads)
        log.info("torch threads: %d", c.threads)
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
        share, opponent_share = c.gpu_memory_utilization, c.opponent_gpu_memory_utilization
    opts: dict[str, Any] = dict(
        batch_size=c.batch_size,
        max_length=c.max_length,
        dtype=c.dtype,
        prompt_format=c.prompt_format,
        trust_remote_code=c.trust_remote_code,
    )
    if c.backend == "hf":
        opts.update(
            device=device,
            kv_reuse_gib=c.kv_reuse_gib,
            cuda_graphs=c.cuda_graphs,
            batch_memory_gib=c.batch_memory_gib,
        )
    else:
        opts.update(
            tensor_parallel_size=c.tensor_parallel_size,
            gpu_memory_utilization=share,
            seed=seed,
            batch_invariant=c.vllm_batch_invariant,
            enforce_eager=c.vllm_enforce_eager,
            device=device or "cuda",
            threads=c.threads,
            batch_memory_gib=c.batch_memory_gib,
        )
    backends = {
        POLICY: (
            load_backend("openai", c.model)
            if model_endpoint
            else load_backend(c.backend, c.model, **opts)
        )
    }
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
    for key, backend in backends.items():
        tokenizer = getattr(backend, "tokenizer", None)  # an endpoint's is not here
        if tokenizer is not None:
            check_moves_fit(game, tokenizer, c.sampling.min_new_tokens, names[key])
    return backends


def log_engine_stats(backends: dict[str, Any]) -> None:
    """What each engine computed (one line per engine, shared ones once)."""
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
