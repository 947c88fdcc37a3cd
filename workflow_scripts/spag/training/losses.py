"""The training objectives of docs/design.md section 4, as pure functions on tensors.

All log-probabilities are sequence level: the mean log-prob of a sample's target
tokens (its final EOS included), query and padding masked out. :func:`sample_logprobs`
computes them for scoring, padded and packed training alike.
"""

from __future__ import annotations

from typing import TypedDict

import torch

IGNORE_INDEX = -100


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-prob (float32) of ``targets[k]`` under the row ``logits[k]`` (``(K, V)``, ``(K,)``)."""
    logits = logits.float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def sample_means(token_lp: torch.Tensor, sample: torch.Tensor, n: int) -> torch.Tensor:
    """Mean of the token log-probs ``token_lp`` ``(K,)`` of each of ``n`` samples
    (``sample`` ``(K,)`` the sample of each), ``(n,)`` in float32; a sample without
    targets gets 0."""
    sums = torch.zeros(n, dtype=torch.float32, device=token_lp.device)
    sums = sums.index_add(0, sample, token_lp.float())
    counts = torch.bincount(sample, minlength=n).clamp(min=1).to(torch.float32)
    return sums / counts


def segment_logsumexp(values: torch.Tensor, segment: torch.Tensor, n: int) -> torch.Tensor:
    """``log(sum(exp(values)))`` within each of ``n`` segments (``segment`` ``(K,)`` the
    segment of each value), ``(n,)``; an empty segment gets ``-inf``. Stable: each
    segment's largest value is taken out before the exponentials."""
    top = torch.full((n,), float("-inf"), dtype=values.dtype, device=values.device)
    top = top.scatter_reduce(0, segment, values.detach(), reduce="amax")
    shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    sums = torch.zeros(n, dtype=values.dtype, device=values.device)
    sums = sums.index_add(0, segment, (values - shift[segment]).exp())
    return sums.log() + shift


def sample_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, sample: torch.Tensor, n: int
) -> torch.Tensor:
    """Mean log-prob of each sample's target tokens, ``(n,)`` in float32.

    The one computation of a sequence-level log-prob (docs/design.md section 4) for
    scoring, padded and packed training: ``logits`` ``(K, V)`` are the rows that
    predict the ``K`` target tokens ``targets``, ``sample`` ``(K,)`` the sample each
    belongs to (:mod:`spag.training.head` makes the same token log-probs a chunk of
    rows at a time). A sample without targets gets 0.
    """
    return sample_means(target_logprobs(logits, targets), sample, n)


def sequence_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean log-prob per sequence of the tokens whose label is not ``IGNORE_INDEX``.

    ``logits`` is ``(B, T, V)`` as a causal LM returns it (position t predicts t+1);
    ``labels`` is ``(B, T)``, aligned with the input ids. Returns ``(B,)`` in float32.
    """
    shift_logits = logits[:, :-1, :]
    shift_labels = labels[:, 1:]
    mask = shift_labels != IGNORE_INDEX
    # Only the target positions need a log-softmax: select them first, which keeps
    # the float32 copy of the logits small when queries are long.
    rows = mask.nonzero(as_tuple=True)[0]
    return sample_logprobs(shift_logits[mask], shift_labels[mask], rows, labels.shape[0])


def first_needed_logit(labels: torch.Tensor) -> int:
    """Index of the earliest position whose logit any learned token needs (query logits are not)."""
    learned = labels[:, 1:] != IGNORE_INDEX
    return int(learned.to(torch.int8).argmax(dim=1).min())


class LossStats(TypedDict):
    """What an objective's loss returns beside its value: sums over its micro-batch, which
    the trainer adds up over a logging interval (and over ranks) into the loss log's
    ``kl``, ``ratio_mean``, ``ratio_min``, ``ratio_max``, ``clipped_frac``, ``n_game`` and
    ``n_sft`` columns. Made by :func:`loss_stats`."""

    kl_sum: torch.Tensor  # sum of the rows' log-ratios to the reference (x - x_ref)
    ratio_sum: torch.Tensor  # sum of their ratios exp(x - x_ref)
    ratio_min: torch.Tensor
    ratio_max: torch.Tensor
    count: torch.Tensor  # rows in the sums above
    n_sft: torch.Tensor  # instruction rows
    n_game: torch.Tensor  # game rows
    clipped: torch.Tensor  # game rows whose ratio left the clip range


def loss_stats(
    x: torch.Tensor,
    x_ref: torch.Tensor,
    is_sft: torch.Tensor,
    clipped: torch.Tensor | None = None,
) -> LossStats:
    """A loss's :class:`LossStats`: the log-ratios of ``x`` (the per-row log-probs the
    loss reads) to ``x_ref``, the rows by type (``is_sft``), and the clipped game rows
    (``clipped``, a count; none if not given)."""
    diff = (x - x_ref).detach()
    ratio = diff.exp()
    is_sft = is_sft.bool()
    count = torch.tensor(float(x.numel()), device=x.device)
    return LossStats(
        kl_sum=diff.sum(),
        ratio_sum=ratio.sum(),
        ratio_min=ratio.min(),
        ratio_max=ratio.max(),
        count=count,
        n_sft=is_sft.sum().to(torch.float32),
        n_game=(~is_sft).sum().to(torch.float32),
        clipped=torch.zeros_like(count) if clipped is None else clipped.to(torch.float32),
    )


def sft_with_kl_loss(
    lp: torch.Tensor,
    ref: torch.Tensor,
    weight: torch.Tensor,
    is_sft: torch.Tensor,
    *,
    kl_coeff: float,
) -> tuple[torch.Tensor, LossStats]:
    """Imitation: mean over the batch of ``(-lp + b * exp(lp) * (lp - ref)) * weight``."""
    per_sample = -lp + kl_coeff * lp.exp() * (lp - ref)
    loss = (per_sample * weight).mean()
    return loss, loss_stats(lp, ref, is_sft)


def offline_po_loss(
    lp: torch.Tensor,
    ref: torch.Tensor,
    reward: torch.Tensor,
    weight: torch.Tensor,
    is_sft: torch.Tensor,
    *,
    kl_coeff: float,
    sft_coeff: float,
    clip_eps: float,
) -> tuple[torch.Tensor, LossStats]:
    """SPAG: clipped importance-weighted game term plus the SFT term, each over its own count.

    ``ratio = exp(lp - ref)``, ``adv = reward - b * (lp - ref)`` (not detached),
    ``ppo = -min(adv * ratio, adv * clip(ratio, 1 - eps, 1 + eps))``;
    ``L = a * sum_sft(-lp * w) / n_sft + sum_game(ppo * w) / n_game`` (a term is 0
    when its count is 0).
    """
    is_sft = is_sft.bool()
    is_game = ~is_sft
    # Game rows of weight 0 (a control arm) count in n_game but are not computed: the
    # exp of a far log-ratio can overflow, and inf * 0 is NaN in the loss and gradient.
    live = is_game & (weight > 0)
    log_ratio = lp[live] - ref[live]
    ratio = log_ratio.exp()
    adv = reward[live] - kl_coeff * log_ratio
    ppo = -torch.minimum(adv * ratio, adv * ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps))
    n_sft = is_sft.sum()
    n_game = is_game.sum()
    zero = lp.sum() * 0.0  # keeps the graph (and the dtype) when a term is empty
    sft_term = sft_coeff * (-lp * weight)[is_sft].sum() / n_sft if int(n_sft) > 0 else zero
    game_term = (ppo * weight[live]).sum() / n_game if int(n_game) > 0 else zero
    # Game samples whose ratio left the trust region (SFT rows are never clipped).
    clipped = ((ratio.detach() - 1.0).abs() > clip_eps).sum()
    return sft_term + game_term, loss_stats(lp, ref, is_sft, clipped)


def legal_po_loss(
    lp: torch.Tensor,
    ref: torch.Tensor,
    move_lp: torch.Tensor,
    ref_move_lp: torch.Tensor,
    legal_logmass: torch.Tensor,
    has_move: torch.Tensor,
    has_legal: torch.Tensor,
    reward: torch.Tensor,
    weight: torch.Tensor,
    is_sft: torch.Tensor,
    *,
    kl_coeff: float,
    sft_coeff: float,
    clip_eps: float,
    legal_mass_coeff: float,
) -> tuple[torch.Tensor, LossStats]:
    """SPAG's loss with the policy over the legal moves (docs/design.md section 4).

    A game row naming a legal move takes the offline-PO term on ``x = move_lp``, its move's
    log-prob renormalised over the moves legal there (``ref_move_lp`` the reference's); a
    game row naming none (a rule break) keeps the sequence's ``lp`` and ``ref``. Each game
    row with legal moves adds ``legal_mass_coeff * -legal_logmass * w``, the log of the
    legal moves' mass at its decision; the game terms are over ``n_game``, the SFT term
    as in :func:`offline_po_loss`.
    """
    is_sft = is_sft.bool()
    is_game = ~is_sft
    has_move = has_move.bool() & is_game
    x = torch.where(has_move, move_lp, lp)
    x_ref = torch.where(has_move, ref_move_lp, ref)
    live = is_game & (weight > 0)  # weight 0: a control arm (see offline_po_loss)
    log_ratio = x[live] - x_ref[live]
    ratio = log_ratio.exp()
    adv = reward[live] - kl_coeff * log_ratio
    ppo = -torch.minimum(adv * ratio, adv * ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps))
    n_sft = is_sft.sum()
    n_game = is_game.sum()
    zero = lp.sum() * 0.0
    sft_term = sft_coeff * (-lp * weight)[is_sft].sum() / n_sft if int(n_sft) > 0 else zero
    mass = live & has_legal.bool()
    game_term = zero
    if int(n_game) > 0:
        game_term = (ppo * weight[live]).sum() / n_game
        game_term = game_term + legal_mass_coeff * ((-legal_logmass * weight)[mass].sum() / n_game)
    clipped = ((ratio.detach() - 1.0).abs() > clip_eps).sum()
    return sft_term + game_term, loss_stats(x, x_ref, is_sft, clipped)
