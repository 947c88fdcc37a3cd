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


def add_adapter(model: Any, lora: LoraSettings, setting: str = "peft") -> Any:
    """``model`` wrapped in a trainable adapter (its own weights frozen); every target
    module named must exist (peft itself refuses only when none does)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        task_type="CAUSAL_LM",
        r=lora.r,
        lora_alpha=lora.lora_alpha,
        lora_dropout=lora.lora_dropout,
        target_modules=list(lora.target_modules),
    )
    linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if _is_linear(m)})
    try:
        wrapped = get_peft_model(model, config)
    except ValueError as exc:
        raise SpagInputError(
            f"{setting}.target_modules: {exc} (the model's linear layers: {', '.join(linear)})"
        ) from None
    targeted = wrapped.targeted_module_names
    missing = [
        t for t in lora.target_modules if not any(n == t or n.endswith("." + t) for n in targeted)
    ]
    if missing:
        raise SpagInputError(
            f"{setting}.target_modules: {', '.join(missing)} not in the model (its linear "
            f"layers: {', '.join(linear)})"
        )
    trainable, total = wrapped.get_nb_trainable_parameters()
    log.info(
        "LoRA r=%d alpha=%g on %d modules: %d of %d parameters trained (%.3f%%)",
        lora.r, lora.lora_alpha, len(targeted), trainable, total, 100 * trainable / total,
    )  # fmt: skip
    return wrapped


def _is_linear(module: Any) -> bool:
    import torch

    return isinstance(module, torch.nn.Linear)


def write_merged(
    base: str | Path,
    adapter: str | Path,
    output: str | Path,
    dtype: str,
    trust_remote_code: bool,
) -> None:
    """The full model ``base`` + ``adapter`` (merged in float32, written in ``dtype``, as
    full fine-tuning writes its weights) to ``output``.

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
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    merged = merged.to(getattr(torch, dtype))
    merged.config.use_cache = True
    merged.save_pretrained(str(output), safe_serialization=True)
