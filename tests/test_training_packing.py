"""Padding-free batches: the packed layout, and log-probs and gradients equal to padded ones."""

from __future__ import annotations

import pytest
import torch
from training_samples import sample_rows

from spag.training.collate import SampleCollator, encode_pairs, pad_token_id
from spag.training.losses import IGNORE_INDEX, offline_po_loss
from spag.training.packing import (
    PACKED_ATTENTION,
    PackedCollator,
    expand_kv_heads,
    packed_sequence_logprobs,
    use_packed_attention,
)
from spag.training.scoring import load_model_and_tokenizer, model_sequence_logprobs


def _feature(ids: list[int], start: int, **extra) -> dict:
    return {"input_ids": ids, "target_start": start, "reward": 0.5, "weight": 1.0,
            "is_sft": False, **extra}  # fmt: skip


def test_packed_layout():
    feats = [
        _feature([1, 5, 6, 7], 2, ref_logprob=-1.0),
        _feature([1, 8, 9], 2, is_sft=True, ref_logprob=-2.0),
        _feature([1, 4, 4, 4, 3], 3, reward=0.25, ref_logprob=-3.0),
    ]
    b = PackedCollator()(feats)
    assert b["input_ids"].tolist() == [[1, 5, 6, 7, 1, 8, 9, 1, 4, 4, 4, 3]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4]]
    x = IGNORE_INDEX
    assert b["labels"].tolist() == [[x, x, 6, 7, x, x, 9, x, x, x, 4, 3]]
    assert b["cu_seq_lens_q"].tolist() == [0, 4, 7, 12] == b["cu_seq_lens_k"].tolist()
    assert b["max_length_q"] == 5 == b["max_length_k"]
    assert b["is_sft"].tolist() == [False, True, False]
    assert b["reward"].tolist() == [0.5, 0.5, 0.25]
    assert b["ref_logprob"].tolist() == [-1.0, -2.0, -3.0]
    assert "attention_mask" not in b
    # A target from the first token (no BOS, empty query): that token predicts nothing,
    # as in a padded batch, and the next sample's first token is not predicted either.
    b = PackedCollator()([_feature([5, 6], 0), _feature([7, 8, 9], 0)])
    assert b["labels"].tolist() == [[x, 6, x, 8, 9]]


def test_a_model_that_bypasses_the_attention_interface_is_refused(monkeypatch):
    from spag.errors import SpagInputError

    model = _gqa_model()
    # What transformers does for such a model: it warns and keeps its attention.
    monkeypatch.setattr(type(model), "set_attn_implementation", lambda self, name: None)
    with pytest.raises(SpagInputError, match="padding_free: false"):
        use_packed_attention(model)


def test_expanded_kv_heads_give_grouped_query_attention():
    # float32 on CUDA takes this path (the fused kernels take enable_gqa in half precision
    # only); it must be the same attention.
    q = torch.randn(1, 8, 12, 16)
    k, v = torch.randn(1, 2, 12, 16), torch.randn(1, 2, 12, 16)
    grouped = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True
    )
    ek, ev = expand_kv_heads(k, v, 8)
    assert ek.shape == (1, 8, 12, 16)
    expanded = torch.nn.functional.scaled_dot_product_attention(q, ek, ev, is_causal=True)
    torch.testing.assert_close(expanded, grouped)


def test_no_token_by_token_mask_is_built_for_a_packed_row():
    from spag.training.packing import packed_mask

    whole = {"batch_size": 1, "q_length": 12, "kv_length": 12, "attention_mask": None}
    assert packed_mask(**whole) is None
    padded = dict(whole, batch_size=2, attention_mask=torch.ones(2, 12, dtype=torch.bool))
    padded["attention_mask"][1, :3] = False
    mask = packed_mask(**padded)
    assert mask is not None and mask.shape == (2, 1, 12, 12)
    assert not bool(mask[1, 0, 5, 0]) and bool(mask[0, 0, 5, 0]) and not bool(mask[0, 0, 0, 5])


def _gqa_model():
    """A small Llama with grouped-query attention (4 query heads, 2 key/value heads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    return LlamaForCausalLM(config).float()


@pytest.mark.parametrize("model_kind", ["tiny", "gqa"])
def test_packed_logprobs_and_gradients_equal_padded(tiny_model_dir, model_kind):
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    if model_kind == "gqa":
        model = _gqa_model()
    rows = sample_rows(7, seed=3)
    encoded, _ = encode_pairs(tok, [r["query"] for r in rows], [r["target"] for r in rows], 96)
    feats = [
        _feature(ids, start, is_sft=i % 3 == 0, reward=0.1 * i, ref_logprob=-1.5)
        for i, (ids, start) in enumerate(encoded)
    ]
    assert len({len(f["input_ids"]) for f in feats}) > 1  # padding would be needed

    def loss_and_grads(lp, batch):
        loss, _ = offline_po_loss(
            lp,
            batch["ref_logprob"],
            batch["reward"],
            batch["weight"],
            batch["is_sft"],
            kl_coeff=0.2,
            sft_coeff=0.5,
            clip_eps=0.2,
        )
        model.zero_grad()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    padded = SampleCollator(pad_token_id(tok))(feats)
    lp_padded = model_sequence_logprobs(
        model, padded["input_ids"], padded["attention_mask"], padded["labels"]
    )
    loss_padded, grads_padded = loss_and_grads(lp_padded, padded)

    use_packed_attention(model)
    assert model.config._attn_implementation == PACKED_ATTENTION
    packed = PackedCollator()(feats)
    lp_packed = packed_sequence_logprobs(model, packed)
    loss_packed, grads_packed = loss_and_grads(lp_packed, packed)

    assert torch.allclose(lp_packed.detach(), lp_padded.detach(), atol=1e-5, rtol=0)
    assert torch.allclose(loss_packed, loss_padded, atol=1e-6)
    for gp, gq in zip(grads_packed, grads_padded, strict=True):
        assert torch.allclose(gp, gq, atol=1e-5, rtol=1e-4)
    # Position 0 predicts nothing in either layout: a target from the first token.
    first = [dict(f, target_start=0) for f in feats[:3]]
    with torch.no_grad():
        p = PackedCollator()(first)
        q = SampleCollator(pad_token_id(tok))(first)
        use_packed_attention(model)
        a = packed_sequence_logprobs(model, p)
        b = model_sequence_logprobs(model, q["input_ids"], q["attention_mask"], q["labels"])
    assert torch.allclose(a, b, atol=1e-5, rtol=0)
    # The packed attention falls back to SDPA for padded batches (scoring, generation).
    again = model_sequence_logprobs(
        model, padded["input_ids"], padded["attention_mask"], padded["labels"]
    )
    assert torch.allclose(again.detach(), lp_padded.detach(), atol=1e-6)
