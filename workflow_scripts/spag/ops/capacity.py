"""How many games a vLLM engine holds at once, from the model's config and the GPU.

vLLM gives an engine ``gpu_memory_utilization`` x the GPU's total memory; from that it
takes the weights, the activations of its profiling pass and CUDA graphs, and keeps the
rest as KV cache in blocks of 16 tokens. A sequence of ``max_length`` tokens holds
``ceil(max_length / 16)`` blocks, so an engine runs at most ``blocks // that`` games of
full length at once; with ``max_num_seqs`` (``batch_size``) above it, vLLM queues or
preempts the rest, and a batch that large buys nothing.

KV bytes per token: 2 (keys and values) x layers x KV heads x head size x dtype bytes.
Weights: the parameters of a Llama-style decoder counted from its config (the
safetensors files' sizes where the model folder has them). The activation reserve is
an estimate (``ACTIVATION_RESERVE_GIB``), not vLLM's measurement: its profile run
decides the real figure on the GPU, which only a GPU can show.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.generation.settings import SelfplaySettings

GIB = 1024**3
BLOCK_TOKENS = 16  # vLLM's default KV cache block size
# Activations of vLLM's profiling pass, CUDA graphs and the non-torch allocations of a
# 7B-class model at vLLM's default token budget: an estimate, measured only on a GPU.
ACTIVATION_RESERVE_GIB = 2.0
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Nominal total memory of common GPU families (GiB): the cards of the capacity table.
# What the estimate reads of a model's config.
NEEDED_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)
GPU_FAMILIES = {"A100-40GB": 40, "A100-80GB / H100-80GB": 80, "H200": 141}


@dataclass(frozen=True)
class Capacity:
    """One engine's memory budget and the games of ``max_length`` tokens it holds."""

    gpu_memory_gib: float
    share: float
    weights_gib: float
    kv_bytes_per_token: int
    kv_cache_gib: float
    tokens: int
    games: int

    def describe(self, max_length: int) -> str:
        return (
            f"{self.games} games of {max_length} tokens at once: {self.share:g} x "
            f"{self.gpu_memory_gib:g} GiB - weights {self.weights_gib:.1f} GiB - reserve "
            f"{ACTIVATION_RESERVE_GIB:g} GiB = KV cache {self.kv_cache_gib:.1f} GiB, at "
            f"{self.kv_bytes_per_token / 1024:g} KiB a token = {self.tokens:,} tokens"
        )


def _dtype_bytes(dtype: str) -> int:
    # auto: vLLM runs a checkpoint as stored, float32 ones in 16 bits: 2 bytes either way.
    return DTYPE_BYTES.get(dtype, 2)


def _head_dim(config: dict[str, Any]) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def kv_bytes_per_token(
    config: dict[str, Any], dtype_bytes: int, tensor_parallel_size: int | None = None
) -> int:
    """Bytes of KV cache one token keeps in every layer, on each GPU of an engine over
    ``tensor_parallel_size`` GPUs (vLLM copies KV heads when there are fewer than GPUs)."""
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    per_gpu = max(kv_heads // max(tensor_parallel_size or 1, 1), 1)
    return 2 * config["num_hidden_layers"] * per_gpu * _head_dim(config) * dtype_bytes


def parameter_count(config: dict[str, Any]) -> int:
    """Parameters of a Llama-style decoder (attention, gated MLP, RMS norms, embeddings)."""
    h, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    d = _head_dim(config)
    attention = h * heads * d * 2 + h * kv_heads * d * 2  # q, o; k, v
    mlp = 3 * h * config["intermediate_size"]
    per_layer = attention + mlp + 2 * h
    embeddings = config["vocab_size"] * h * (1 if config.get("tie_word_embeddings") else 2)
    return layers * per_layer + embeddings + h


def engine_capacity(
    config: dict[str, Any],
    *,
    gpu_memory_gib: float,
    share: float,
    max_length: int,
    dtype: str = SelfplaySettings.dtype,
    parameters: int | None = None,
    tensor_parallel_size: int | None = None,
) -> Capacity:
    """The capacity of one engine on GPUs of ``gpu_memory_gib`` (an engine spanning
    ``tensor_parallel_size`` GPUs splits weights and KV heads over them); ``parameters``
    where known (:func:`model_config`), else counted from the config."""
    nbytes = _dtype_bytes(dtype)
    tp = max(int(tensor_parallel_size or 1), 1)
    weights = (parameters or parameter_count(config)) * nbytes / tp
    per_token = kv_bytes_per_token(config, nbytes, tp)
    kv = max(gpu_memory_gib * share - weights / GIB - ACTIVATION_RESERVE_GIB, 0.0)
    blocks = int(kv * GIB) // (per_token * BLOCK_TOKENS)
    games = blocks // math.ceil(max_length / BLOCK_TOKENS)
    return Capacity(
        gpu_memory_gib=gpu_memory_gib,
        share=share,
        weights_gib=weights / GIB,
        kv_bytes_per_token=per_token,
        kv_cache_gib=kv,
        tokens=blocks * BLOCK_TOKENS,
        games=games,
    )


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config (multimodal configs nest it)."""
    return config.get("text_config", config) if "num_hidden_layers" not in config else config


def model_config(model_dir: str | Path) -> tuple[dict[str, Any], int | None]:
    """A model folder's ``config.json`` and its parameter count from the safetensors
    headers (None where it has no safetensors files)."""
    import struct

    folder = Path(model_dir)
    config = text_config(json.loads((folder / "config.json").read_text()))
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return config, None
    count = 0
    for f in files:
        with f.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        count += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    return config, count
