"""Decoding attention for the ``hf`` backend's slots: the shared prompt prefix read once.

Every prompt of a self-play call starts with the same rules, so every row of a
decoding step attends to the same prefix keys/values. Stored per row, that prefix
is read once per row and step, and on a memory-bound step it is most of what the
step reads. Here it is stored once and each step attends to it and to the row's own
keys/values (its ring of slots, ``hf_backend._Slots``) separately: one softmax over
both parts' scores, then each part's values read by its own product (the cascade
attention of FlashInfer and Hydragen). The result is the softmax attention over all
of a row's keys, up to rounding.

The model keeps its attention implementation (SDPA, eager, flash) for prompt
passes: the function registered here calls it unless the forward passes
``slot_prefix`` (a decoding step of the slots).
"""

from __future__ import annotations

from typing import Any

NAME = "spag_slots_"


def use_slot_attention(model: Any) -> None:
    """Route the model's attention through :func:`slot_attention`, its own
    implementation still serving prompt passes. Models whose layers are not all full
    attention (sliding windows, linear attention) or that cap their scores are refused:
    the decoding step computes plain softmax attention."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from spag.errors import SpagInputError

    config = model.config.get_text_config()
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    capped = getattr(config, "attn_logit_softcapping", None)
    if layer_types != {"full_attention"} or capped:
        raise SpagInputError(
            f"the hf backend decodes full-attention models only ({config.model_type} has "
            f"{', '.join(sorted(layer_types))}{' and capped scores' if capped else ''}); "
            "use selfplay.backend: vllm"
        )
    base = config._attn_implementation or "sdpa"
    if base.startswith(NAME):
        return
    name = NAME + base
    if name not in ALL_ATTENTION_FUNCTIONS:
        base_fn = ALL_ATTENTION_FUNCTIONS.get_interface(base, None)
        if base_fn is None:  # eager has no entry: the model's module-level function
            import importlib

            module = importlib.import_module(type(model).__module__)
            base_fn = module.eager_attention_forward

        def attention(module, query, key, value, attention_mask, **kwargs):
            if "slot_prefix" in kwargs:
                return slot_attention(module, query, key, value, attention_mask, **kwargs)
            return base_fn(module, query, key, value, attention_mask, **kwargs)

        AttentionInterface.register(name, attention)
        mask = ALL_MASK_ATTENTION_FUNCTIONS.get(base) or ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]
        AttentionMaskInterface.register(name, mask)
    model.set_attn_implementation(name)


def slot_attention(
    module: Any,
    query,
    key,
    value,
    attention_mask,
    *,
    scaling: float,
    slot_prefix: list[tuple] | None,
    **_: Any,
):
    """Attention of one decoding step: ``query`` (rows, heads, 1, dim) over the shared
    prefix ``slot_prefix[layer]`` (keys and values of shape (kv heads, tokens, dim), the
    same for every row) and over each row's ``key``/``value`` (rows, kv heads, slots,
    dim) where ``attention_mask`` (rows, 1, 1, slots; 0 or the dtype's minimum) allows.
    Returns (rows, 1, heads, dim) and no weights, as transformers' implementations."""
    import torch

    rows, heads, steps, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    # Rows' queries grouped by the key/value head they read (grouped-query attention).
    q = query.reshape(rows, kv_heads, group * steps, dim)
    scores = torch.matmul(q, key.transpose(-1, -2)).float() * scaling
    if attention_mask is not None:
        scores = scores + attention_mask.float()
    if not slot_prefix:
        probs = torch.softmax(scores, dim=-1).to(value.dtype)
        out = torch.matmul(probs, value)
    else:
        pk, pv = slot_prefix[module.layer_idx]
        shared_len = pk.shape[1]
        # Every row's queries of a head in one product with that head's prefix: the
        # prefix is read once for the whole batch.
        qh = q.transpose(0, 1).reshape(kv_heads, rows * group * steps, dim)
        shared = torch.matmul(qh, pk.transpose(-1, -2)).float() * scaling
        shared = shared.reshape(kv_heads, rows, group * steps, shared_len).transpose(0, 1)
        # One softmax over the prefix's and the row's own scores (the scores are small
        # beside the keys and values).
        probs = torch.softmax(torch.cat((shared, scores), dim=-1), dim=-1).to(value.dtype)
        own = torch.matmul(probs[..., shared_len:], value)
        head_probs = probs[..., :shared_len].transpose(0, 1).reshape(kv_heads, -1, shared_len)
        part = torch.matmul(head_probs, pv).reshape(kv_heads, rows, group * steps, dim)
        out = (own.float() + part.transpose(0, 1).float()).to(value.dtype)
    out = out.reshape(rows, heads, steps, dim)
    return out.transpose(1, 2).contiguous(), None
