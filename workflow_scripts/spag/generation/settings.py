"""Generation settings, declared once: how a reply is sampled (:class:`SamplingSettings`,
:class:`Sampling`) and the config sections of the games' engines, ``selfplay`` and
``evaluation``.

The defaults here are the schema's (``tests/test_settings.py`` checks it); ``spag play``'s
flags (``spag.game.play_settings.PlayConfig``) and the backends refer to them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from spag.errors import SpagInputError
from spag.settings import opt, section

DTYPES = ("auto", "float32", "bfloat16", "float16")
# Backends that play a local model folder (``openai`` takes an endpoint spec instead).
MODEL_BACKENDS = ("hf", "vllm")


@dataclass(frozen=True, kw_only=True)
class SamplingSettings:
    """How replies are drawn, as a run sets it: config ``selfplay`` and ``spag play``'s
    flags inherit these fields, every generate call gets them in :class:`Sampling`.

    A knob added here is a ``spag play`` flag and a rule flag of self-play at once, and
    reaches vLLM's ``SamplingParams`` and an endpoint's request under its own name
    (:meth:`Sampling.engine_params`; metadata ``engine``: another name there, ``greedy``:
    its value in greedy decoding). Add it to the schema's ``selfplay`` section, check its
    range in :meth:`__post_init__`, and apply it in the ``hf`` backend's decoding loop
    (``HFBackend._pick``).
    """

    max_new_tokens: int = opt(256, "tokens per reply at most", engine="max_tokens")
    temperature: float = opt(1.2, "sampling temperature", greedy=0.0)
    top_k: int = opt(
        50,
        "sample from the k most likely tokens; 0: no limit (the research code kept "
        "transformers' default 50)",
        greedy=0,
    )
    top_p: float = opt(
        1.0, "nucleus sampling: the smallest set of tokens with this mass", greedy=1.0
    )

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise SpagInputError(f"--max-new-tokens must be at least 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise SpagInputError(f"--temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise SpagInputError(f"--top-k must be >= 0 (0: no limit), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise SpagInputError(f"--top-p must be in (0, 1], got {self.top_p}")


def sampling_knobs() -> tuple[str, ...]:
    """The names of the :class:`SamplingSettings` fields, in their order."""
    return tuple(f.name for f in dataclasses.fields(SamplingSettings))


@dataclass(frozen=True, kw_only=True)
class Sampling(SamplingSettings):
    """How every reply of a generate call is drawn; the defaults are self-play's."""

    # How the knobs apply, not a knob of the engines (engine=None).
    greedy: bool = opt(False, "greedy decoding (the most likely token; no sampling)", engine=None)

    @property
    def samples(self) -> bool:
        """Whether replies are drawn at random (not greedy, temperature above 0)."""
        return not self.greedy and self.temperature > 0

    def engine_params(self) -> dict[str, Any]:
        """The knobs as vLLM's ``SamplingParams`` and OpenAI-compatible servers name
        them; in greedy decoding temperature 0 and no top-k / top-p filter."""
        params = {}
        for f in dataclasses.fields(self):
            name = f.metadata.get("engine", f.name)
            if name is None:
                continue
            value = getattr(self, f.name)
            if "greedy" in f.metadata and not self.samples:
                value = f.metadata["greedy"]
            params[name] = value
        return params


@section("selfplay")
@dataclass(frozen=True, kw_only=True)
class SelfplaySettings(SamplingSettings):
    """Self-play games of an epoch (config ``selfplay``): the shards, the engine and the
    sampling (the inherited knobs); evaluation games use the same engine settings."""

    num_shards: int = opt(
        3,
        "one job per shard of the train words (at most words.num_train; shard files are "
        "numbered 000-999)",
    )
    games_per_secret: int = opt(
        1, "games per secret (target word, deal) per epoch; Kuhn Poker needs many hands"
    )
    backend: str = opt("hf", "generation backend", choices=MODEL_BACKENDS)
    batch_size: int = opt(64, "hf: sequences per generate call; vllm: max_num_seqs")
    max_length: int = opt(2048, "prompt + reply token budget, capped by the model's context")
    dtype: str = opt("auto", "model dtype (auto: float32 on CPU)", choices=DTYPES)
    tensor_parallel_size: int | None = opt(
        None, "vllm: GPUs one engine spans; None: the GPUs of the job"
    )
    batch_memory_gib: float | None = opt(
        None,
        "hf: memory one sub-batch may take; None: four fifths of the free GPU memory, or "
        "half of the memory available on CPU",
    )
    gpu_memory_utilization: float = opt(
        0.9, "vllm: share of each GPU's total memory the self-play engine takes"
    )
    kv_reuse_gib: float = opt(2.0, "hf: memory for keys/values kept between a game's turns")
    vllm_batch_invariant: bool = opt(
        False,
        "vllm: batch-invariant kernels (VLLM_BATCH_INVARIANT=1), so that a rerun of a "
        "shard reproduces its games whatever else shares the batch; slower",
    )


@section("evaluation")
@dataclass(frozen=True, kw_only=True)
class EvaluationSettings:
    """Evaluation games against a fixed opponent (config ``evaluation``; its ``reasoning``
    subsection is declared by the reasoning evaluation)."""

    opponent: str = opt(
        "imitation",
        '"imitation" (M0), "base", a model folder, or an OpenAI-compatible endpoint',
    )
    num_shards: int = opt(
        1,
        "one job per shard of the test words for each evaluated model (at most "
        "words.num_test); the shards' games are merged into one file",
    )
    max_new_tokens: int = opt(256, "tokens per reply at most")
    batch_size: int = opt(64, "hf: sequences per generate call; vllm: max_num_seqs")
    sampled_games_per_secret: int = opt(
        0,
        "besides the greedy games: games per secret and role sampled as in self-play (0: none)",
    )
    gpu_memory_utilization: float = opt(
        0.45, "vllm: share of the GPU's total memory of the evaluated model's engine"
    )
    opponent_gpu_memory_utilization: float = opt(
        0.45, "vllm: share of the GPU's total memory of a local opponent's engine"
    )
