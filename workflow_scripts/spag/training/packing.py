"""Padding-free training batches: a micro-batch's samples packed into one row.

Right-padded batches of SPAG samples waste about a third of their slots (each batch
keeps the SFT/game mix of a random batch, so lengths differ, see
:class:`spag.training.collate.LengthGroupedSampler`). Packed, the samples are
concatenated into one row whose position ids restart at every sample; attention runs
per sample (causal, one SDPA call each, never across samples), and the vocabulary
projection runs only at the positions that predict a learned token. Every sample sees
exactly the tokens it sees in a padded batch, so its log-prob is the same up to
floating-point rounding; the batch composition and the loss are unchanged.

The attention is a function registered with transformers' attention interface under
:data:`PACKED_ATTENTION`. It reads the sample boundaries from the ``cu_seq_lens_q``
keyword (the convention of transformers' padding-free flash attention); without it
(padded batches, generation) it is transformers' SDPA attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from spag.training.collate import sample_columns
from spag.training.losses import IGNORE_INDEX, sample_logprobs, sample_means

PACKED_ATTENTION = "spag_packed_sdpa"


def packed_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Causal attention within each packed sample (``cu_seq_lens_q``), else plain SDPA."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    bounds = kwargs.get("cu_seq_lens_q")
    if bounds is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError(f"a packed batch is one row, got {query.shape[0]}")
    for option in ("softcap", "sliding_window", "position_bias"):
        if kwargs.get(option) is not None:
            raise ValueError(
                f"the packed attention does not implement {option}; "
                "train this model with padding_free: false"
            )
    # (1, heads, tokens, dim); key and value may have fewer heads (grouped queries).
    gqa = key.shape[1] != query.shape[1]
    if gqa and query.is_cuda and query.dtype == torch.float32:
        key, value = expand_kv_heads(key, value, query.shape[1])
        gqa = False
    dropout = dropout if module.training else 0.0
    cuts = kwargs.get("spag_cuts") or bounds.tolist()
    parts = [
        torch.nn.functional.scaled_dot_product_attention(
            query[:, :, a:b],
            key[:, :, a:b],
            value[:, :, a:b],
            dropout_p=dropout,
            is_causal=True,
            scale=scaling,
            enable_gqa=gqa,
        )
        for a, b in zip(cuts[:-1], cuts[1:], strict=True)
    ]
    out = torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]
    return out.transpose(1, 2).contiguous(), None


def expand_kv_heads(
    key: torch.Tensor, value: torch.Tensor, heads: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Key and value heads repeated to ``heads`` query heads.

    CUDA's fused SDPA kernels take grouped queries (``enable_gqa``) in half precision
    only; in float32 SDPA falls back to its math kernel, which stores the scores. On an
    H200 (perf/results/gpu/, 16 query and 4 key/value heads, 1k tokens) that was 2.7x
    slower and took 7x the memory of the expanded heads, expansion included.
    """
    group = heads // key.shape[1]
    return key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)


def packed_mask(*args, **kwargs):
    """SDPA's mask, except for a whole sequence without padding (no 2-D mask, no cache):
    there the attention is causal within each sample (packed) or over the row, and a
    (tokens x tokens) mask of a packed row would only be built to be ignored."""
    from transformers.masking_utils import sdpa_mask

    if (
        kwargs.get("attention_mask") is None
        and not kwargs.get("q_offset")
        and not kwargs.get("kv_offset")
        and kwargs.get("q_length") == kwargs.get("kv_length")
    ):
        return None
    return sdpa_mask(*args, **kwargs)


def register_packed_attention() -> str:
    """Register :func:`packed_sdpa_attention` and :func:`packed_mask` under :data:`PACKED_ATTENTION`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(PACKED_ATTENTION, packed_sdpa_attention)
    AttentionMaskInterface.register(PACKED_ATTENTION, packed_mask)
    return PACKED_ATTENTION


def use_packed_attention(model) -> None:
    """Switch ``model`` (or the model inside a wrapper) to the packed attention.

    A model whose attention does not go through transformers' attention interface
    (some remote-code models) keeps its own and would attend across packed samples:
    that is refused.
    """
    from spag.errors import SpagInputError

    register_packed_attention()
    inner = getattr(model, "module", model)
    inner.set_attn_implementation(PACKED_ATTENTION)
    if getattr(inner.config, "_attn_implementation", None) != PACKED_ATTENTION:
        raise SpagInputError(
            f"{type(inner).__name__} does not take the packed attention (its attention "
            "bypasses transformers' attention interface); train it with padding_free: false"
        )


@dataclass
class PackedCollator:
    """Concatenate features into one row (``input_ids``, ``position_ids``, ``labels`` of
    shape ``(1, tokens)``) with the sample boundaries ``cu_seq_lens_q``/``_k``; labels mask
    query and BOS as in :class:`spag.training.collate.SampleCollator`. Per-sample columns
    (reward, weight, is_sft, ref_logprob) are as in a padded batch."""

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor | int]:
        lengths = [len(f["input_ids"]) for f in features]
        total = sum(lengths)
        input_ids = torch.empty((1, total), dtype=torch.long)
        position_ids = torch.empty((1, total), dtype=torch.long)
        labels = torch.full((1, total), IGNORE_INDEX, dtype=torch.long)
        start = 0
        for f, n in zip(features, lengths, strict=True):
            ids = torch.tensor(f["input_ids"], dtype=torch.long)
            input_ids[0, start : start + n] = ids
            position_ids[0, start : start + n] = torch.arange(n)
            # Position 0 predicts nothing (as in a padded batch, where the shift drops
            # it): a sample's first label stays ignored even when its target starts
            # there (no BOS, empty query), so no position predicts across samples.
            ts = max(int(f["target_start"]), 1)
            labels[0, start + ts : start + n] = ids[ts:]
            start += n
        bounds = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        batch: dict[str, torch.Tensor | int] = {
            "input_ids": input_ids,
            "position_ids": position_ids,
            "labels": labels,
            "cu_seq_lens_q": bounds,
            "cu_seq_lens_k": bounds,
            "max_length_q": max(lengths),
            "max_length_k": max(lengths),
            **sample_columns(features),
        }
        return batch


def packed_sequence_logprobs(model, batch: dict) -> torch.Tensor:
    """Mean log-prob of each packed sample's learned tokens, ``(samples,)`` in float32.

    Only the positions that predict a learned token are projected onto the vocabulary
    (a chunk at a time where the model takes :mod:`spag.training.head`, else
    ``logits_to_keep`` as indices). A sample's first label is always ``IGNORE_INDEX``
    (its query comes first), so no position predicts across a sample boundary.
    """
    from spag.training.head import takes_chunked_head

    labels = batch["labels"]
    bounds = batch["cu_seq_lens_q"]
    n = bounds.numel() - 1
    keep = (labels[0, 1:] != IGNORE_INDEX).nonzero(as_tuple=True)[0]
    targets = labels[0, keep + 1]
    # The sample of the predicted token (position keep + 1).
    sample = torch.searchsorted(bounds.to(keep.dtype), keep + 1, right=True) - 1
    inputs = dict(
        input_ids=batch["input_ids"],
        position_ids=batch["position_ids"],
        use_cache=False,
        cu_seq_lens_q=bounds,
        cu_seq_lens_k=bounds,
        max_length_q=batch["max_length_q"],
        max_length_k=batch["max_length_k"],
        # The boundaries as host integers: read once, not once per layer from the device.
        spag_cuts=tuple(batch["cu_seq_lens_q"].tolist()),
    )
    if takes_chunked_head(model):
        return sample_means(model(**inputs, spag_targets=(keep, targets)), sample, n)
    out = model(**inputs, logits_to_keep=keep)
    logits = out.logits.reshape(-1, out.logits.shape[-1])
    if logits.shape[0] != keep.numel():  # a model that ignores logits_to_keep
        logits = logits[keep]
    return sample_logprobs(logits, targets, sample, n)
