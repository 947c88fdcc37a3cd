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
from spag.training.losses import IGNORE_INDEX, sample_means, target_logprobs

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
    # A sample with its moves' branches (tree_mask) attends by its own mask.
    masks = kwargs.get("spag_masks") or (None,) * (len(cuts) - 1)
    parts = [
        torch.nn.functional.scaled_dot_product_attention(
            query[:, :, a:b],
            key[:, :, a:b],
            value[:, :, a:b],
            attn_mask=mask,
            dropout_p=dropout,
            is_causal=mask is None,
            scale=scaling,
            enable_gqa=gqa,
        )
        for a, b, mask in zip(cuts[:-1], cuts[1:], masks, strict=True)
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


def tree_mask(tree: tuple[int, int, tuple[int, ...]], device=None) -> torch.Tensor:
    """The attention mask (True: attends) of a sample followed by its moves' branches:
    ``tree`` = (query tokens, sample tokens, each branch's tokens). The sample is causal;
    each branch sees the query and itself (causally), never the sample's target or
    another branch, so its tokens get exactly the log-probs they have after the query."""
    trunk, n, branches = tree
    total = n + sum(branches)
    mask = torch.ones((total, total), dtype=torch.bool, device=device).tril()
    start = n
    for length in branches:
        mask[start : start + length, trunk:start] = False
        start += length
    return mask


@dataclass
class PackedCollator:
    """Concatenate features into one row (``input_ids``, ``position_ids``, ``labels`` of
    shape ``(1, tokens)``) with the sample boundaries ``cu_seq_lens_q``/``_k``; labels mask
    query and BOS as in :class:`spag.training.collate.SampleCollator`. Per-sample columns
    (reward, weight, is_sft, ref_logprob) are as in a padded batch.

    A feature with ``forms`` (:func:`spag.training.collate.move_branches`) is followed in
    its segment by one branch per form, placed after its query (positions, and a
    :func:`tree_mask`), whose tokens' log-probs give each legal move's probability:
    ``move_positions``/``move_tokens`` (where each branch token is predicted, and the
    token), ``move_form`` (its form), ``form_slot`` (each form's (sample, move) slot),
    ``slot_sample``, ``chosen_slot`` (per sample, its move's slot or -1) and ``spag_trees``.
    """

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor | int]:
        lengths = [len(f["input_ids"]) + sum(map(len, f.get("forms", ()))) for f in features]
        total = sum(lengths)
        input_ids = torch.empty((1, total), dtype=torch.long)
        position_ids = torch.empty((1, total), dtype=torch.long)
        labels = torch.full((1, total), IGNORE_INDEX, dtype=torch.long)
        start = 0
        moves: dict[str, list[int]] = {k: [] for k in _MOVE_KEYS}
        trees: list[tuple[int, int, tuple[int, ...]] | None] = []
        for i, (f, length) in enumerate(zip(features, lengths, strict=True)):
            ids = torch.tensor(f["input_ids"], dtype=torch.long)
            n = len(ids)
            input_ids[0, start : start + n] = ids
            position_ids[0, start : start + n] = torch.arange(n)
            # Position 0 predicts nothing (as in a padded batch, where the shift drops
            # it): a sample's first label stays ignored even when its target starts
            # there (no BOS, empty query), so no position predicts across samples.
            ts = max(int(f["target_start"]), 1)
            labels[0, start + ts : start + n] = ids[ts:]
            trees.append(_add_branches(f, i, start, n, input_ids, position_ids, moves))
            start += length
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
        if any(t is not None for t in trees):
            for key, values in moves.items():
                batch[key] = torch.tensor(values, dtype=torch.long)
            batch["spag_trees"] = tuple(trees)
        return batch


_MOVE_KEYS = ("move_positions", "move_tokens", "move_form", "form_slot", "slot_sample",
              "chosen_slot")  # fmt: skip


def _add_branches(
    f: dict,
    sample: int,
    start: int,
    n: int,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    moves: dict[str, list[int]],
) -> tuple[int, int, tuple[int, ...]] | None:
    """Write feature ``f``'s branches after its ``n`` tokens (the segment at ``start``)
    and record where their tokens are predicted; returns its tree, or None."""
    forms = f.get("forms")
    trunk = int(f["target_start"])
    if not forms or trunk < 1:  # no query token to predict a form's first token
        moves["chosen_slot"].append(-1)
        return None
    first_slot = len(moves["slot_sample"])
    moves["slot_sample"].extend([sample] * f["n_moves"])
    moves["chosen_slot"].append(first_slot + f["move"] if f["move"] >= 0 else -1)
    at = start + n
    for form, move in zip(forms, f["form_move"], strict=True):
        form_index = len(moves["form_slot"])
        moves["form_slot"].append(first_slot + move)
        for j, token in enumerate(form):
            input_ids[0, at + j] = token
            position_ids[0, at + j] = trunk + j
            # The first token is predicted by the query's last, the others by the branch.
            moves["move_positions"].append(start + trunk - 1 if j == 0 else at + j - 1)
            moves["move_tokens"].append(token)
            moves["move_form"].append(form_index)
        at += len(form)
    return trunk, n, tuple(len(form) for form in forms)


@dataclass
class MoveLogprobs:
    """Per sample of a packed batch: ``move`` the log-prob of its move among the legal ones
    (0 where ``has_move`` is False: no legal move named, or no moves), ``legal`` the log of
    the legal moves' mass at its decision (0 where ``has_legal`` is False)."""

    move: torch.Tensor
    legal: torch.Tensor
    has_move: torch.Tensor
    has_legal: torch.Tensor


def move_logprobs(token_lp: torch.Tensor, batch: dict, n: int) -> MoveLogprobs:
    """The moves' log-probs from their branch tokens' log-probs ``token_lp``: a form's is
    the sum over its tokens, a move's the log of the sum of its forms' probabilities, the
    legal mass the sum over the legal moves."""
    from spag.training.losses import segment_logsumexp

    form_slot, slot_sample = batch["form_slot"], batch["slot_sample"]
    forms = torch.zeros(form_slot.numel(), dtype=torch.float32, device=token_lp.device)
    forms = forms.index_add(0, batch["move_form"], token_lp.float())
    slots = segment_logsumexp(forms, form_slot, slot_sample.numel())
    legal_all = segment_logsumexp(slots, slot_sample, n)
    has_legal = torch.zeros(n, dtype=torch.bool, device=token_lp.device)
    has_legal[slot_sample] = True
    legal = torch.where(has_legal, legal_all, torch.zeros_like(legal_all))
    chosen = batch["chosen_slot"]
    has_move = chosen >= 0
    picked = slots[chosen.clamp(min=0)] - legal_all
    move = torch.where(has_move, picked, torch.zeros_like(picked))
    return MoveLogprobs(move=move, legal=legal, has_move=has_move, has_legal=has_legal)


def packed_sequence_logprobs(model, batch: dict) -> torch.Tensor:
    """Mean log-prob of each packed sample's learned tokens, ``(samples,)`` in float32.

    Only the positions that predict a learned token are projected onto the vocabulary
    (a chunk at a time where the model takes :mod:`spag.training.head`, else
    ``logits_to_keep`` as indices). A sample's first label is always ``IGNORE_INDEX``
    (its query comes first), so no position predicts across a sample boundary.
    """
    return packed_logprobs(model, batch)[0]


def packed_logprobs(model, batch: dict) -> tuple[torch.Tensor, MoveLogprobs | None]:
    """:func:`packed_sequence_logprobs` and, where the batch has moves' branches
    (:class:`PackedCollator`), their :func:`move_logprobs`, from the same forward pass."""
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
    trees = batch.get("spag_trees")
    learned = keep.numel()
    if trees is not None:
        device = batch["input_ids"].device
        inputs["spag_masks"] = tuple(None if t is None else tree_mask(t, device) for t in trees)
        keep = torch.cat([keep, batch["move_positions"]])
        targets = torch.cat([targets, batch["move_tokens"]])
    if takes_chunked_head(model):
        token_lp = model(**inputs, spag_targets=(keep, targets))
    else:
        out = model(**inputs, logits_to_keep=keep)
        logits = out.logits.reshape(-1, out.logits.shape[-1])
        if logits.shape[0] != keep.numel():  # a model that ignores logits_to_keep
            logits = logits[keep]
        token_lp = target_logprobs(logits, targets)
    lp = sample_means(token_lp[:learned], sample, n)
    if trees is None:
        return lp, None
    return lp, move_logprobs(token_lp[learned:], batch, n)
