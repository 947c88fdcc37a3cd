"""Low-rank adapters (LoRA) for a training stage: the stage trains an adapter on the
frozen model M(e-1) and writes M(e) as a full model folder, the adapter merged, so that
every step downstream (play, scoring, evaluation, vLLM, lm-eval) reads a model as after
full fine-tuning. The adapter is kept in the folder's ``adapter/`` for provenance.

This is not the paper's method (it fine-tunes every weight): a reproduction keeps
``peft: null``. Settings are peft's ``LoraConfig`` names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spag.errors import SpagInputError
from spag.models.settings import ModelLoading
from spag.settings import Checked, opt

log = logging.getLogger(__name__)

# Every attention and MLP projection of a Llama-family decoder (the adapter's default).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# The adapter's folder inside a model folder written by a LoRA stage.
ADAPTER_DIR = "adapter"


@dataclass(frozen=True, kw_only=True)
class LoraSettings(Checked):
    """A low-rank adapter (config ``imitation.peft`` / ``spag.peft``): ``W + (lora_alpha /
    r) B A`` on each target module, ``A`` and ``B`` trained, ``W`` frozen."""

    r: int = opt(16, "rank of the adapter's matrices A and B", ge=1)
    lora_alpha: float = opt(32, "scale of the update: (lora_alpha / r) B A", gt=0)
    lora_dropout: float = opt(0.0, "dropout on the adapter's input", ge=0, lt=1)
    target_modules: tuple[str, ...] = opt(
        LORA_TARGETS,
        "modules that get an adapter, by name or name suffix (default: every attention "
        "and MLP projection of a Llama-family model)",
        schema={"minItems": 1, "uniqueItems": True},
    )
    merged_dtype: str | None = opt(
        None,
        "dtype of the merged model's weights: null, the training's (bfloat16 with bf16: "
        "an update small against the weights is mostly rounded away, the merge logs the "
        "share kept); float32 keeps it whole at twice the disk (4 bytes a parameter: 27 GB "
        "for a 7B model), for readers that load float32 (stages reading bfloat16 round it "
        "again as they load)",
        choices=("float32",),
    )


def adaptable_modules(model: Any) -> list[str]:
    """The names of ``model``'s modules an adapter can take (linear layers, GPT-2's
    ``Conv1D``, embeddings), in the model's order."""
    import torch
    from transformers.pytorch_utils import Conv1D

    kinds = (torch.nn.Linear, Conv1D, torch.nn.Embedding)
    return [name for name, m in model.named_modules() if name and isinstance(m, kinds)]


def _matches(name: str, target: str) -> bool:
    # peft's rule for a list of targets: the module's name or its last dotted parts.
    return name == target or name.endswith("." + target)


def check_targets(model: Any, lora: LoraSettings, setting: str = "peft") -> None:
    """Refuse targets that name no adaptable module of ``model`` (which may be built on
    the meta device), and targets on an embedding tied to the output layer: the merge
    would write the update into the one shared matrix, so the merged model would not be
    the policy that was trained."""
    names = adaptable_modules(model)
    suffixes = sorted({n.rsplit(".", 1)[-1] for n in names})
    missing = [t for t in lora.target_modules if not any(_matches(n, t) for n in names)]
    if missing:
        raise SpagInputError(
            f"{setting}.target_modules: {', '.join(missing)} not in the model "
            f"({type(model).__name__}; the modules an adapter can take: {', '.join(suffixes)})"
        )
    inputs, outputs = model.get_input_embeddings(), model.get_output_embeddings()
    if inputs is None or outputs is None or inputs.weight is not outputs.weight:
        return
    tied = [n for n, m in model.named_modules() if m is inputs or m is outputs]
    on_tied = [t for t in lora.target_modules if any(_matches(n, t) for n in tied)]
    if on_tied:
        raise SpagInputError(
            f"{setting}.target_modules: {', '.join(on_tied)} is one matrix with "
            f"{' and '.join(tied)} (the model ties its input and output embeddings): merged, "
            "the update would change both, and the merged model would not be the trained "
            "policy; leave it out of target_modules"
        )


def check_targets_for_config(
    model_config: Any,
    lora: LoraSettings,
    setting: str,
    trust_remote_code: bool = ModelLoading.trust_remote_code,
) -> None:
    """:func:`check_targets` on the model ``model_config`` describes, built on the meta
    device (no weights: a 7B model takes a fraction of a second)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config, trust_remote_code=trust_remote_code)
    check_targets(model, lora, setting)


def add_adapter(model: Any, lora: LoraSettings, setting: str = "peft") -> Any:
    """``model`` wrapped in a trainable adapter (its own weights frozen); every target
    module named must exist (peft itself refuses only when none does)."""
    from peft import LoraConfig, get_peft_model

    check_targets(model, lora, setting)
    config = LoraConfig(
        task_type="CAUSAL_LM",
        r=lora.r,
        lora_alpha=lora.lora_alpha,
        lora_dropout=lora.lora_dropout,
        target_modules=list(lora.target_modules),
    )
    wrapped = get_peft_model(model, config)
    trainable, total = wrapped.get_nb_trainable_parameters()
    log.info(
        "LoRA r=%d alpha=%g on %d modules: %d of %d parameters trained (%.3f%%)",
        lora.r, lora.lora_alpha, len(wrapped.targeted_module_names), trainable, total,
        100 * trainable / total,
    )  # fmt: skip
    return wrapped


def update_rounding(model: Any, dtype: Any) -> float | None:
    """The share of the adapters' update that storing the merged weights in ``dtype``
    loses: ``|round(W + dW) - (W + dW)| / |dW|`` over every adapted module (Frobenius
    norms, float32), None when the update is zero. Read before the merge, one module
    at a time, so no second copy of the model is held."""
    err_sq = delta_sq = 0.0
    for module in model.modules():
        if not hasattr(module, "get_delta_weight") or not hasattr(module, "get_base_layer"):
            continue
        weight = module.get_base_layer().weight
        for name in module.active_adapters:
            delta = module.get_delta_weight(name).detach().float()
            merged = weight.detach().float() + delta
            err_sq += float((merged.to(dtype).float() - merged).square().sum())
            delta_sq += float(delta.square().sum())
    return (err_sq / delta_sq) ** 0.5 if delta_sq > 0 else None


# A merge that loses more than this share of the update to rounding is warned about.
ROUNDING_WARN = 0.1


def write_merged(
    base: str | Path,
    adapter: str | Path,
    output: str | Path,
    dtype: str,
    trust_remote_code: bool,
) -> float | None:
    """The full model ``base`` + ``adapter`` (merged in float32, written in ``dtype``, as
    full fine-tuning writes its weights) to ``output``; returns the share of the update
    the rounding to ``dtype`` lost (:func:`update_rounding`).

    One process, the base loaded whole on the CPU: under ZeRO-3 the trained model's
    weights are partitioned across ranks, and peft does not gather them to merge.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    # After a ZeRO-3 run the trainer's DeepSpeed config is still registered, and
    # from_pretrained would partition the base as it loads (a weight of size 0 on this
    # rank, which peft cannot merge into). Training is over: load it whole.
    unset_hf_deepspeed_config()
    model = AutoModelForCausalLM.from_pretrained(
        base, dtype=torch.float32, use_safetensors=True, trust_remote_code=trust_remote_code
    )
    with_adapter = PeftModel.from_pretrained(model, str(adapter))
    stored = getattr(torch, dtype)
    lost = update_rounding(with_adapter, stored)
    if lost is None:
        log.info("merge: the adapter's update is zero; %s is the base model", output)
    elif lost > ROUNDING_WARN:
        log.warning(
            "merge: storing %s rounds away %.0f%% of the adapter's update (its norm); set "
            "peft.merged_dtype: float32 to keep it, or see docs/design.md (LoRA)",
            dtype, 100 * lost,
        )  # fmt: skip
    else:
        log.info("merge: storing %s rounds away %.1f%% of the adapter's update", dtype, 100 * lost)
    merged = with_adapter.merge_and_unload().to(stored)
    merged.config.use_cache = True
    merged.save_pretrained(str(output), safe_serialization=True)
    return lost
