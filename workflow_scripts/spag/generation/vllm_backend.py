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
"""

from __future__ import annotations

from pathlib import Path

from spag.errors import SpagInputError
from spag.generation.base import (
    Backend,
    Reply,
    context_budget,
    stop_token_ids,
)
from spag.generation.settings import Sampling, SelfplaySettings
from spag.models.rendering import PromptRenderer


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
        engine_opts = dict(
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
        )
        if batch_size:
            engine_opts["max_num_seqs"] = int(batch_size)
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
                skip_special_tokens=True,
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
            replies.append(
                Reply(
                    text=completion.text.strip(),
                    num_tokens=len(completion.token_ids),
                    finished_by_eos=completion.finish_reason == "stop",
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
