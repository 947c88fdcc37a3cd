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

from spag.errors import SpagInputError
from spag.generation.settings import SelfplaySettings
from spag.training.head import CHUNK_ROWS
from spag.training.lora import LORA_TARGETS

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


def read_model(path: str | Path, flag: str = "--model") -> tuple[dict[str, Any], int | None]:
    """A model folder's (or a ``config.json``'s) config and parameter count (None where
    unknown), refused in one sentence naming ``flag`` where there is none to read, or
    naming the file where it is not a decoder these estimates know."""
    from spag.errors import SpagInputError

    path = Path(path)
    if not path.exists():
        raise SpagInputError(f"{flag} {path}: no such folder or file (give a model folder "
                             "or its config.json)")  # fmt: skip
    if path.is_dir() and not (path / "config.json").is_file():
        raise SpagInputError(f"{flag} {path}: the folder has no config.json (give a model "
                             "folder or its config.json)")  # fmt: skip
    try:
        if path.is_file():
            config, parameters = text_config(json.loads(path.read_text())), None
        else:
            config, parameters = model_config(path)
    except (OSError, ValueError) as exc:
        raise SpagInputError(f"{flag} {path}: unreadable ({exc})") from None
    missing = [k for k in NEEDED_KEYS if k not in config]
    if missing:
        raise SpagInputError(
            f"{path}: the config has no {', '.join(missing)}: not a decoder this estimate knows"
        )
    return config, parameters


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


# ---------------------------------------------------------------- training jobs
# Bytes per trained parameter: weights, gradients and AdamW's two moments. Without
# DeepSpeed the Trainer keeps fp32 weights and gradients (bf16 only inside autocast):
# 4 + 4 + 8; ZeRO-3 in bf16 keeps bf16 weights and gradients and fp32 master weights
# and moments: 2 + 2 + 12 (the ZeRO paper's 16), 18 with fp32 gradient accumulation.
STATE_BYTES = 16
STATE_BYTES_FP32_GRADS = 18
# CUDA context, kernels and the allocator's fragmentation (the Hugging Face memory
# anatomy's 1-2 GB): an estimate, measured only on a GPU.
CUDA_OVERHEAD_GIB = 1.5


@dataclass(frozen=True)
class ZeroLayout:
    """How DeepSpeed holds a training job's model states (stage 0: no DeepSpeed)."""

    stage: int = 0
    offload_optimizer: bool = False
    offload_param: bool = False
    fp32_grads: bool = False
    # Gathered parameters ZeRO-3 keeps on a GPU before releasing any (DeepSpeed's
    # stage3_max_live_parameters, its default 1e9).
    max_live_parameters: int = 10**9

    @classmethod
    def from_config(cls, ds_config: dict[str, Any] | None) -> ZeroLayout:
        """The layout of a DeepSpeed config (None: no DeepSpeed)."""
        if not ds_config:
            return cls()
        zero = ds_config.get("zero_optimization") or {}

        def offloaded(key: str) -> bool:
            return (zero.get(key) or {}).get("device") in ("cpu", "nvme")

        accum = (ds_config.get("data_types") or {}).get("grad_accum_dtype")
        live = zero.get("stage3_max_live_parameters", cls.max_live_parameters)
        return cls(
            stage=int(zero.get("stage", 0)),
            offload_optimizer=offloaded("offload_optimizer"),
            offload_param=offloaded("offload_param"),
            fp32_grads=accum == "fp32",
            max_live_parameters=int(live) if isinstance(live, (int, float)) else 10**9,
        )


def lora_parameter_count(
    config: dict[str, Any],
    rank: int,
    targets: tuple[str, ...] = LORA_TARGETS,
    setting: str = "target_modules",
) -> int:
    """Parameters of rank-``rank`` adapters on the ``targets`` projections of every layer
    of a Llama-style decoder: ``rank x (in + out)`` for each."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv = (config.get("num_key_value_heads") or heads) * _head_dim(config)
    q = heads * _head_dim(config)
    shapes = {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, inter),
        "up_proj": (h, inter),
        "down_proj": (inter, h),
    }
    unknown = sorted(set(targets) - set(shapes))
    if unknown:
        raise SpagInputError(
            f"{setting}: {', '.join(unknown)} is not a projection of a Llama-style decoder, "
            f"the only layout the estimate counts (its projections: {', '.join(shapes)})"
        )
    return config["num_hidden_layers"] * sum(rank * sum(shapes[t]) for t in targets)


def largest_module_parameters(config: dict[str, Any]) -> int:
    """The largest single module (ZeRO-3 gathers one at a time): the embeddings or the
    output layer, vocabulary x hidden size, or the widest MLP projection."""
    h = config["hidden_size"]
    return max(config["vocab_size"] * h, config["intermediate_size"] * h)


def activation_elements_per_token(config: dict[str, Any]) -> int:
    """Activations one decoder layer keeps for the backward pass, per token: the two norms'
    inputs and outputs, queries, keys and values before and after the rotary embedding,
    the attention's output (SDPA or FlashAttention: no score matrix kept), the output
    projection's, and the gated MLP's four intermediate tensors."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv = (config.get("num_key_value_heads") or heads) * _head_dim(config)
    q = heads * _head_dim(config)
    norms = 4 * h
    attention = 2 * (q + 2 * kv) + q + h  # q, k, v twice (rotary), attention out, o_proj out
    mlp = 4 * inter + h
    return norms + attention + mlp


@dataclass(frozen=True)
class TrainingMemory:
    """One training job's memory per GPU (GiB), by part, and per node on the host where
    DeepSpeed offloads."""

    trained_parameters: int
    weights_gib: float  # frozen weights (LoRA), or the trained ones' share of model states
    states_gib: float  # trained weights, gradients and optimizer moments on the GPU
    gathered_gib: float  # ZeRO-3's working set of gathered weights (and gradients)
    activations_gib: float
    logits_gib: float
    overhead_gib: float
    host_gib: float  # offloaded states, per node

    @property
    def total_gib(self) -> float:
        return (
            self.weights_gib
            + self.states_gib
            + self.gathered_gib
            + self.activations_gib
            + self.logits_gib
            + self.overhead_gib
        )

    def describe(self) -> str:
        parts = [
            f"weights {self.weights_gib:.1f}",
            f"trained states {self.states_gib:.1f}",
            f"gathered {self.gathered_gib:.1f}" if self.gathered_gib else "",
            f"activations {self.activations_gib:.1f}",
            f"logits {self.logits_gib:.1f}",
            f"CUDA {self.overhead_gib:g}",
        ]
        text = f"{self.total_gib:.1f} GiB per GPU ({', '.join(p for p in parts if p)})"
        if self.host_gib:
            text += f"; {self.host_gib:.0f} GiB of host memory per node (offload)"
        return text


def training_memory(
    config: dict[str, Any],
    *,
    per_device_batch_size: int,
    max_length: int,
    bf16: bool,
    activation_checkpointing: bool,
    zero: ZeroLayout = ZeroLayout(),
    gpus: int = 1,
    nodes: int = 1,
    lora_rank: int | None = None,
    lora_targets: tuple[str, ...] = LORA_TARGETS,
    parameters: int | None = None,
    targets_setting: str = "target_modules",
) -> TrainingMemory:
    """The memory of one ``spag train`` job per GPU, for full fine-tuning or, with
    ``lora_rank``, for adapters on a frozen base (weights in bf16 with ``bf16``, the
    adapters, their gradients and AdamW's moments in fp32).

    ``gpus`` is the job's data-parallel size (GPUs per node x ``nodes``). A micro-batch
    is ``per_device_batch_size`` samples packed into at most that many times
    ``max_length`` tokens; the logits are those of one chunk of learned positions
    (:data:`spag.training.head.CHUNK_ROWS`), in bf16 or fp32 with their fp32 log-softmax
    and both gradients.
    """
    total = parameters or parameter_count(config)
    ranks = max(gpus, 1)
    act_bytes = 2 if bf16 else 4
    largest = largest_module_parameters(config)
    sharded = zero.stage == 3
    state_bytes = STATE_BYTES_FP32_GRADS if zero.fp32_grads else STATE_BYTES
    if lora_rank:
        trained = lora_parameter_count(config, lora_rank, lora_targets, targets_setting)
        frozen = total * act_bytes  # the base in the training dtype, no gradients
        weights = frozen / ranks if sharded else frozen
        states = trained * STATE_BYTES  # small: kept whole on every GPU
        host = 0.0
        if sharded and zero.offload_param:
            host, weights = frozen * 1.5 / max(nodes, 1), 0.0
    else:
        trained = total
        weights = 0.0
        states = trained * state_bytes / ranks if sharded else trained * state_bytes
        host = 0.0
        if sharded and (zero.offload_optimizer or zero.offload_param):
            # Offloaded: the partitions live on the host (DeepSpeed's estimate: 1.5x
            # buffers); the GPU keeps the gathered modules only.
            host = trained * state_bytes * 1.5 / max(nodes, 1)
            states = 0.0
    # ZeRO-3 keeps up to max_live_parameters gathered 16-bit weights on the GPU beside
    # its partition (one H200, a 0.85B model: the whole model gathered, 3.4 GiB above
    # LoRA without DeepSpeed), and the largest module's gradients on the way back.
    gathered = 0
    if sharded:
        gathered = 2 * min(zero.max_live_parameters, total) + (0 if lora_rank else 2 * largest)
    tokens = per_device_batch_size * max_length
    per_layer = activation_elements_per_token(config) * tokens * act_bytes
    h, layers = config["hidden_size"], config["num_hidden_layers"]
    if activation_checkpointing:
        # Each layer's input kept; one layer recomputed, with its gradients, at a time.
        activations = layers * tokens * h * act_bytes + 2 * per_layer
    else:
        activations = layers * per_layer
    # The learned positions' logits, a chunk at a time (spag.training.head): one chunk's,
    # in the training dtype and float32, with both gradients, made again in the backward.
    logits = min(tokens, CHUNK_ROWS) * config["vocab_size"] * (2 * act_bytes + 4 + 4)
    return TrainingMemory(
        trained_parameters=trained,
        weights_gib=weights / GIB,
        states_gib=states / GIB,
        gathered_gib=gathered / GIB,
        activations_gib=activations / GIB,
        logits_gib=logits / GIB,
        overhead_gib=CUDA_OVERHEAD_GIB,
        host_gib=host / GIB,
    )


TRAIN_STAGES = ("imitation", "spag")


@dataclass(frozen=True)
class StageEstimate:
    """A training stage's job (from the run's config) and its memory per GPU, full
    fine-tuning beside LoRA; ``chosen`` is the method the config trains it with."""

    stage: str
    shape: str
    estimates: dict[str, TrainingMemory]
    chosen: str


def stage_estimates(
    run_config: dict[str, Any],
    model: dict[str, Any],
    parameters: int | None,
    stages: tuple[str, ...] = TRAIN_STAGES,
    lora_rank: int = 16,
    lora_targets: tuple[str, ...] = LORA_TARGETS,
) -> list[StageEstimate]:
    """Each stage of a validated config on ``model``: its micro-batch, GPUs and DeepSpeed
    layout; LoRA at the stage's own ``peft`` settings, else at ``lora_rank`` on
    ``lora_targets`` (what LoRA would take)."""
    from spag.training.distributed import resolve_deepspeed

    resources = run_config["resources"]["train"]
    nodes = max(int(resources.get("nodes", 1)), 1)
    gpus = max(int(resources.get("gpus", 0)), 1) * nodes
    out = []
    for stage in stages:
        s = run_config[stage]
        ds = resolve_deepspeed(s["deepspeed"])
        common = dict(
            per_device_batch_size=s["per_device_batch_size"],
            max_length=s["max_length"],
            bf16=s["bf16"],
            activation_checkpointing=s["activation_checkpointing"],
            zero=ZeroLayout.from_config(json.loads(Path(ds).read_text()) if ds else None),
            gpus=gpus,
            nodes=nodes,
            parameters=parameters,
        )
        peft = s["peft"]
        rank, targets = (
            (peft["r"], tuple(peft["target_modules"])) if peft else (lora_rank, lora_targets)
        )
        lora = f"LoRA r={rank}"
        where = f"key '{stage}.peft.target_modules'" if peft else "--lora-targets"
        out.append(
            StageEstimate(
                stage=stage,
                shape=(
                    f"{s['per_device_batch_size']} samples of {s['max_length']} tokens per "
                    f"GPU, {gpus} GPU(s) on {nodes} node(s), deepspeed "
                    f"{s['deepspeed'] or 'none'}, bf16 {s['bf16']}, activation "
                    f"checkpointing {s['activation_checkpointing']}"
                ),
                estimates={
                    "full fine-tuning": training_memory(model, **common),
                    lora: training_memory(
                        model,
                        lora_rank=rank,
                        lora_targets=targets,
                        targets_setting=where,
                        **common,
                    ),
                },
                chosen=lora if peft else "full fine-tuning",
            )
        )
    return out
