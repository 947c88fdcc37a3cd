"""The learned tokens' log-probs from the model's final hidden states, the vocabulary
projection made a chunk of positions at a time.

A micro-batch of the paper's shape (2 x 2,048 tokens, a 32k vocabulary) has up to 131M
logits; made whole, they and their float32 log-softmax and its gradient (about 10 bytes
a logit, 1.2 GiB) live from the forward pass to the backward. Here the model runs to its
final hidden states, and the output layer projects :data:`CHUNK_ROWS` of the learned
positions at a time: each chunk's log-softmax is gathered at its targets and dropped, and
made again in the backward pass (``torch.utils.checkpoint``). One chunk's logits live at a
time, for one more output-layer product (``2 x rows x hidden x vocabulary`` FLOPs: about
1% of a LLaMA-2-7B training step, but a third of a tiny model's, whose output layer is
most of it): a batch within one chunk keeps its logits and makes nothing again. The
values are today's up to the rounding of a matrix product taken over fewer rows.

SPAG's loss needs each token's log-prob with its gradient, not a reduced cross-entropy:
fused kernels that return only the loss (liger-kernel's fused linear cross-entropy before
0.8.2, its fused GRPO/DPO losses, which compute their gradients in the forward) cannot
give it, and all of them need triton, which a CPU run has not.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch where a forward runs: the memory estimate reads CHUNK_ROWS
    import torch

# Learned positions projected onto the vocabulary at once: 1024 x 32k logits are about
# 0.4 GiB with their float32 copy and gradients.
CHUNK_ROWS = 1024
# Config keys of models whose forward changes the output layer's logits (soft-capping,
# scaling): those keep their own forward and the logits made whole.
LOGIT_TRANSFORMS = (
    "final_logit_softcapping",
    "logit_scale",
    "logits_scaling",
    "output_multiplier",
    "lm_head_multiplier",
)
_MARK = "_spag_chunked_head"


def chunked_target_logprobs(
    head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, rows: int = CHUNK_ROWS
) -> torch.Tensor:
    """Log-prob (float32) of ``targets[k]`` under ``head(hidden[k])``, ``rows`` positions at a
    time; under autograd, with more than one chunk, each chunk's logits are made again in
    the backward pass (a single chunk is kept, as the whole logits were)."""
    import torch

    from spag.training.losses import target_logprobs

    def part(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return target_logprobs(head(h), t)

    # One chunk's logits may be held to the backward (what the memory estimate counts):
    # only a batch of several chunks pays for making them again.
    grad = torch.is_grad_enabled() and hidden.shape[0] > rows
    pieces = []
    for start in range(0, hidden.shape[0], rows):
        h, t = hidden[start : start + rows], targets[start : start + rows]
        if grad:
            from torch.utils.checkpoint import checkpoint

            pieces.append(checkpoint(part, h, t, use_reentrant=False))
        else:
            pieces.append(part(h, t))
    if not pieces:
        return hidden.new_zeros(0, dtype=torch.float32)
    return torch.cat(pieces)


def _causal_lm(model: Any) -> Any:
    inner = getattr(model, "module", model)  # DeepSpeed / DDP wrappers
    if hasattr(inner, "get_base_model"):  # peft
        inner = inner.get_base_model()
    return inner


def use_chunked_head(model: Any) -> bool:
    """Give the causal LM inside ``model`` a forward that, called with ``spag_targets=
    (positions, targets)``, returns the targets' log-probs (:func:`chunked_target_logprobs`
    on the final hidden states at ``positions`` of the flattened batch) instead of
    logits; without the keyword it is the model's own. The call still goes through every
    wrapper's forward (DeepSpeed's ZeRO-3 gathers, DDP's gradient hooks).

    Returns False, and changes nothing, for a model whose forward changes its logits
    (:data:`LOGIT_TRANSFORMS`) or that has no separate decoder and output layer.
    """
    inner = _causal_lm(model)
    if getattr(inner, _MARK, False):
        return True
    config = getattr(inner, "config", None)
    if any(getattr(config, key, None) not in (None, 1, 1.0) for key in LOGIT_TRANSFORMS):
        return False
    get_decoder = getattr(inner, "get_decoder", None)
    if get_decoder is None or get_decoder() is None or inner.get_output_embeddings() is None:
        return False
    inner.forward = functools.partial(_forward, inner, inner.forward)
    setattr(inner, _MARK, True)
    return True


def takes_chunked_head(model: Any) -> bool:
    """Whether :func:`use_chunked_head` gave ``model`` its forward."""
    return bool(getattr(_causal_lm(model), _MARK, False))


def _forward(
    model: Any,
    own_forward: Any,
    *args: Any,
    spag_targets: tuple[torch.Tensor, torch.Tensor] | None = None,
    **kwargs: Any,
) -> Any:
    if spag_targets is None:
        return own_forward(*args, **kwargs)
    positions, targets = spag_targets
    for unused in ("logits_to_keep", "labels"):
        kwargs.pop(unused, None)
    out = model.get_decoder()(*args, **kwargs)
    hidden = out[0]
    rows = hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions)
    return chunked_target_logprobs(model.get_output_embeddings(), rows, targets, CHUNK_ROWS)
