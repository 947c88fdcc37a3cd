"""The docs/design.md section 4 losses and their gradients against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from spag.training.losses import (
    IGNORE_INDEX,
    LossStats,
    first_needed_logit,
    offline_po_loss,
    sample_logprobs,
    sequence_logprobs,
    sft_with_kl_loss,
)

LN2, LN3 = math.log(2.0), math.log(3.0)
# The paper's OfflinePO coefficients.
COEFFS = {"kl_coeff": 0.2, "sft_coeff": 0.5, "clip_eps": 0.2}


def test_sequence_logprobs_by_hand():
    # Row 0: ids [1, 2, 0, 2], query = first two tokens; logits[1] predicts 0, logits[2] predicts 2.
    # Row 1: ids [1, 1, pad, pad], one target token predicted by logits[0].
    logits = torch.zeros(2, 4, 3)
    logits[0, 1] = torch.tensor([0.0, LN2, 0.0])  # p(0) = 1/4
    logits[0, 2] = torch.tensor([0.0, 0.0, LN2])  # p(2) = 2/4
    logits[0, 3] = torch.tensor([9.0, -9.0, 3.0])  # predicts past the end: ignored
    logits[1, 0] = torch.tensor([LN3, 0.0, 0.0])  # p(1) = 1/5
    logits[1, 1] = torch.tensor([5.0, 5.0, -5.0])  # predicts padding: ignored
    labels = torch.tensor(
        [[IGNORE_INDEX, IGNORE_INDEX, 0, 2], [IGNORE_INDEX, 1, IGNORE_INDEX, IGNORE_INDEX]]
    )
    lp = sequence_logprobs(logits, labels)
    expected = torch.tensor([(math.log(0.25) + math.log(0.5)) / 2, math.log(0.2)])
    assert torch.allclose(lp, expected, atol=1e-6)


def test_sequence_logprobs_gradient_matches_plain_log_softmax():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 7, generator=g, requires_grad=True)
    labels = torch.randint(0, 7, (3, 6), generator=g)
    labels[:, :2] = IGNORE_INDEX
    labels[2, 4:] = IGNORE_INDEX
    lp = sequence_logprobs(logits, labels)
    lp.sum().backward()
    ours = logits.grad.clone()

    logits.grad = None
    logp = logits[:, :-1].log_softmax(-1)
    shifted = labels[:, 1:]
    mask = shifted != IGNORE_INDEX
    tok = logp.gather(-1, shifted.clamp(min=0).unsqueeze(-1)).squeeze(-1) * mask
    ref = tok.sum(1) / mask.sum(1)
    ref.sum().backward()
    assert torch.allclose(lp, ref.detach(), atol=1e-6)
    assert torch.allclose(ours, logits.grad, atol=1e-6)


def test_sft_with_kl_loss_and_gradient():
    lp = torch.tensor([-1.0, -2.0], requires_grad=True)
    ref = torch.tensor([-1.5, -1.0])
    weight = torch.tensor([1.0, 2.0])
    is_sft = torch.tensor([True, False])
    loss, stats = sft_with_kl_loss(lp, ref, weight, is_sft, kl_coeff=0.1)
    # loss_i = -lp + 0.1 * exp(lp) * (lp - ref); mean of loss_i * w_i
    l0 = 1.0 + 0.1 * math.exp(-1.0) * 0.5
    l1 = 2.0 + 0.1 * math.exp(-2.0) * -1.0
    assert loss.item() == pytest.approx((l0 * 1.0 + l1 * 2.0) / 2, abs=1e-6)
    loss.backward()
    # d loss_i / d lp_i = -1 + b * exp(lp) * (lp - ref + 1), times w_i / batch size
    g0 = (-1.0 + 0.1 * math.exp(-1.0) * 1.5) * 1.0 / 2
    g1 = (-1.0 + 0.1 * math.exp(-2.0) * 0.0) * 2.0 / 2
    assert lp.grad.tolist() == pytest.approx([g0, g1], abs=1e-6)
    assert stats["kl_sum"].item() == pytest.approx(0.5 + -1.0)
    assert set(stats) == set(LossStats.__annotations__)
    assert (stats["n_sft"].item(), stats["n_game"].item(), stats["clipped"].item()) == (1, 1, 0)


def test_offline_po_loss_and_gradient_by_hand():
    # 0: game, ratio 1, adv 0.6 (unclipped)
    # 1: game, ratio e^0.5 > 1.2 with adv 0.9 > 0 (clipped at 1.2)
    # 2: sft
    # 3: game, ratio e^-0.5 < 0.8 with adv -0.4 < 0 (clipped at 0.8)
    lp = torch.tensor([-1.0, -0.5, -2.0, -1.5], requires_grad=True)
    ref = torch.tensor([-1.0, -1.0, -1.0, -1.0])
    reward = torch.tensor([0.6, 1.0, 1.0, -0.5])
    weight = torch.tensor([1.0, 2.0, 1.0, 1.0])
    is_sft = torch.tensor([False, False, True, False])
    loss, stats = offline_po_loss(
        lp, ref, reward, weight, is_sft, kl_coeff=0.2, sft_coeff=0.5, clip_eps=0.2
    )
    ppo = [-0.6, -0.9 * 1.2, None, 0.4 * 0.8]
    expected = 0.5 * (2.0 * 1.0) / 1 + (ppo[0] * 1.0 + ppo[1] * 2.0 + ppo[3] * 1.0) / 3
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    loss.backward()
    expected_grad = [
        -(-0.2 * 1.0 + 0.6 * 1.0) * 1.0 / 3,  # -(d adv * ratio + adv * d ratio)
        -(-0.2 * 1.2) * 2.0 / 3,  # clipped ratio is a constant: only adv's KL term moves
        -0.5 * 1.0 / 1,  # sft: a * -w / n_sft
        -(-0.2 * 0.8) * 1.0 / 3,
    ]
    assert lp.grad.tolist() == pytest.approx(expected_grad, abs=1e-6)
    assert stats["n_game"].item() == 3 and stats["n_sft"].item() == 1
    assert stats["clipped"].item() == 2
    assert stats["ratio_max"].item() == pytest.approx(math.exp(0.5), abs=1e-6)


def test_offline_po_learns_nothing_from_game_samples_of_weight_0():
    # The control arm: game rows weigh 0, so only the SFT rows move the model, by the
    # same gradient as in a batch where the games have any other rewards.
    lp = torch.tensor([-1.0, -0.5, -2.0, -1.5], requires_grad=True)
    ref = torch.tensor([-1.0, -1.0, -1.0, -1.0])
    is_sft = torch.tensor([False, False, True, False])
    weight = torch.tensor([0.0, 0.0, 1.0, 0.0])
    grads = []
    for reward in ([0.6, 1.0, 1.0, -0.5], [5.0, -3.0, 1.0, 2.0]):
        lp.grad = None
        loss, _ = offline_po_loss(lp, ref, torch.tensor(reward), weight, is_sft,
                                  kl_coeff=0.2, sft_coeff=0.5, clip_eps=0.2)  # fmt: skip
        loss.backward()
        grads.append(lp.grad.tolist())
    assert grads[0] == grads[1] == pytest.approx([0.0, 0.0, -0.5, 0.0])
    # Far from the reference (exp overflows in float32) a weightless row is still inert.
    far = torch.tensor([-1.0, -0.5, -2.0, -1.5], requires_grad=True)
    loss, _ = offline_po_loss(far, torch.tensor([-95.0, -1.0, -1.0, -1.0]),
                              torch.ones(4), weight, is_sft, **COEFFS)  # fmt: skip
    loss.backward()
    assert math.isfinite(loss.item()) and far.grad.tolist() == pytest.approx(grads[0])


def test_offline_po_takes_the_unclipped_branch_outside_the_clip_range():
    # The min picks adv * ratio, not adv * clip(ratio), whenever that is smaller, even
    # with the ratio outside [1 - eps, 1 + eps]: the clip only removes the incentive to
    # move further, never the penalty of having moved the wrong way.
    # 0: game, ratio e^0.5 > 1.2 with adv -1 - 0.2 * 0.5 = -1.1 < 0 (unclipped)
    # 1: game, ratio e^-0.5 < 0.8 with adv 0.5 + 0.2 * 0.5 = 0.6 > 0 (unclipped)
    lp = torch.tensor([-0.5, -1.5], requires_grad=True)
    ref = torch.tensor([-1.0, -1.0])
    reward = torch.tensor([-1.0, 0.5])
    weight = torch.tensor([1.0, 2.0])
    is_sft = torch.tensor([False, False])
    loss, stats = offline_po_loss(
        lp, ref, reward, weight, is_sft, kl_coeff=0.2, sft_coeff=0.5, clip_eps=0.2
    )
    r0, r1 = math.exp(0.5), math.exp(-0.5)
    ppo = [1.1 * r0, -0.6 * r1]  # -adv * ratio; -adv * clip(ratio) would be [1.32, -0.48]
    assert loss.item() == pytest.approx((ppo[0] * 1.0 + ppo[1] * 2.0) / 2, abs=1e-6)
    loss.backward()
    # d(-adv * ratio)/d lp = -(d adv * ratio + adv * d ratio) = -ratio * (adv - b)
    expected_grad = [-r0 * (-1.1 - 0.2) * 1.0 / 2, -r1 * (0.6 - 0.2) * 2.0 / 2]
    assert lp.grad.tolist() == pytest.approx(expected_grad, abs=1e-6)
    assert stats["clipped"].item() == 2  # both left the trust region, whichever branch won


@pytest.mark.parametrize("sft_rows", [[False, False], [True, True]])
def test_offline_po_empty_term_is_zero(sft_rows):
    lp = torch.tensor([-1.0, -3.0], requires_grad=True)
    ref = torch.tensor([-1.0, -3.0])
    reward = torch.tensor([0.25, 0.75])
    weight = torch.tensor([1.0, 1.0])
    loss, _ = offline_po_loss(lp, ref, reward, weight, torch.tensor(sft_rows), **COEFFS)
    if sft_rows[0]:
        assert loss.item() == pytest.approx(0.5 * (1.0 + 3.0) / 2)
    else:
        assert loss.item() == pytest.approx(-(0.25 + 0.75) / 2)
    loss.backward()
    assert torch.isfinite(lp.grad).all()


def test_at_reference_the_ratio_is_one():
    lp = torch.tensor([-2.5, -0.75, -1.25])
    _, stats = offline_po_loss(
        lp, lp.clone(), torch.ones(3), torch.ones(3), torch.tensor([False, False, True]), **COEFFS
    )
    assert stats["ratio_min"].item() == 1.0 and stats["ratio_max"].item() == 1.0


def test_sample_logprobs_is_the_mean_per_sample_and_zero_without_targets():
    logits = torch.tensor([[0.0, LN3], [LN2, 0.0], [0.0, 0.0]])  # p = 1/4 3/4 | 2/3 1/3 | 1/2
    targets = torch.tensor([1, 0, 1])
    lp = sample_logprobs(logits, targets, torch.tensor([0, 0, 2]), 3)
    expected = [(math.log(0.75) + math.log(2 / 3)) / 2, 0.0, math.log(0.5)]
    assert lp.tolist() == pytest.approx(expected, abs=1e-6)


def test_first_needed_logit_is_before_the_earliest_target():
    m = IGNORE_INDEX
    labels = torch.tensor([[m, m, m, m, 7, 2], [m, m, 5, 6, 2, m], [m, m, m, 4, 2, m]])
    assert first_needed_logit(labels) == 1  # row 1's first target (index 2) needs logit 1
