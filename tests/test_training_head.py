"""The learned tokens' log-probs with the vocabulary projected a chunk of positions at a
time (spag.training.head): the values and gradients of the logits made whole, less held
for the backward pass, on hand-made tensors and on the tiny model, padded, packed and
under an adapter."""

from __future__ import annotations

import pytest
import torch

from spag.training import head as head_module
from spag.training.head import chunked_target_logprobs, takes_chunked_head, use_chunked_head
from spag.training.losses import IGNORE_INDEX, target_logprobs


def _saved_bytes(fn) -> int:
    """Bytes autograd keeps for the backward pass while ``fn`` runs, and its result."""
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(saved), out


@pytest.mark.parametrize("rows", [1, 3, 7, 64])
def test_chunks_give_the_values_and_gradients_of_the_whole_logits(rows):
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=True)
    hidden = torch.randn(7, 8, requires_grad=True)
    targets = torch.randint(0, 50, (7,))
    whole = target_logprobs(head(hidden), targets)
    weights = torch.linspace(-1, 2, 7)
    whole_grads = torch.autograd.grad((whole * weights).sum(), (hidden, head.weight, head.bias))
    chunked = chunked_target_logprobs(head, hidden, targets, rows)
    grads = torch.autograd.grad((chunked * weights).sum(), (hidden, head.weight, head.bias))
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-6)
    for got, want in zip(grads, whole_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # By hand for one row: log softmax at the target.
    logits = head(hidden[2]).detach()
    assert float(chunked[2].detach()) == pytest.approx(
        float(logits[targets[2]] - torch.logsumexp(logits, 0)), abs=1e-6
    )


def test_only_one_chunk_of_logits_is_kept_for_the_backward_pass():
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 4096, bias=False)
    hidden = torch.randn(512, 16, requires_grad=True)
    targets = torch.randint(0, 4096, (512,))
    whole, _ = _saved_bytes(lambda: target_logprobs(head(hidden), targets))
    chunked, _ = _saved_bytes(lambda: chunked_target_logprobs(head, hidden, targets, 64))
    one_chunk, _ = _saved_bytes(lambda: chunked_target_logprobs(head, hidden, targets, 512))
    logits_fp32 = 512 * 4096 * 4
    assert whole >= logits_fp32  # the float32 logits (and their logsumexp) kept
    assert chunked < logits_fp32 / 8  # the inputs only: the chunks are made again
    # Within one chunk nothing is made again: its logits are kept, as whole ones.
    assert one_chunk >= logits_fp32


def test_an_empty_batch_of_targets_gives_no_log_probs():
    head = torch.nn.Linear(4, 10)
    out = chunked_target_logprobs(head, torch.zeros(0, 4), torch.zeros(0, dtype=torch.long))
    assert out.shape == (0,) and out.dtype == torch.float32


def _batch(vocab: int):
    torch.manual_seed(1)
    ids = torch.randint(3, vocab, (3, 12))
    mask = torch.ones_like(ids)
    mask[2, 9:] = 0  # right padding
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 5:] = ids[0, 5:]
    labels[1, 2:] = ids[1, 2:]
    labels[2, 6:9] = ids[2, 6:9]
    return ids, mask, labels


def _models(tiny_model_dir, adapter: bool):
    from transformers import AutoModelForCausalLM

    from spag.training.lora import LoraSettings, add_adapter
    from spag.training.packing import use_packed_attention

    pair = []
    for chunked in (False, True):
        torch.manual_seed(0)
        m = AutoModelForCausalLM.from_pretrained(tiny_model_dir, use_safetensors=True)
        use_packed_attention(m)  # as training with padding_free
        if chunked:
            assert use_chunked_head(m) and takes_chunked_head(m)
        if adapter:
            m = add_adapter(m, LoraSettings(r=4, target_modules=("q_proj", "v_proj")))
            with torch.no_grad():  # a moved adapter (B = 0 at the start is a no-op)
                for name, p in m.named_parameters():
                    if "lora_B" in name:
                        p.copy_(torch.randn_like(p) * 0.1)
        pair.append(m)
    return pair


@pytest.mark.parametrize("adapter", [False, True], ids=["full", "lora"])
def test_the_tiny_model_padded_and_packed_as_with_whole_logits(
    tiny_model_dir, monkeypatch, adapter
):
    from spag.training.packing import PackedCollator, packed_sequence_logprobs
    from spag.training.scoring import model_sequence_logprobs

    monkeypatch.setattr(head_module, "CHUNK_ROWS", 5)  # several chunks in these batches
    whole_model, chunked_model = _models(tiny_model_dir, adapter)
    ids, mask, labels = _batch(whole_model.config.vocab_size)
    features = [
        {"input_ids": ids[i, : int(mask[i].sum())].tolist(), "target_start": start,
         "reward": 0.0, "weight": 1.0, "is_sft": False, "ref_logprob": 0.0}
        for i, start in enumerate((5, 2, 6))
    ]  # fmt: skip
    packed = PackedCollator()(features)
    results = []
    for model in (whole_model, chunked_model):
        padded_lp = model_sequence_logprobs(model, ids, mask, labels)
        packed_lp = packed_sequence_logprobs(model, packed)
        trained = [p for p in model.parameters() if p.requires_grad]
        grads = torch.autograd.grad((padded_lp.sum() + 2 * packed_lp.sum()), trained)
        results.append((padded_lp.detach(), packed_lp.detach(), grads))
    (pad_w, pack_w, grads_w), (pad_c, pack_c, grads_c) = results
    torch.testing.assert_close(pad_c, pad_w, rtol=0, atol=1e-6)
    torch.testing.assert_close(pack_c, pack_w, rtol=0, atol=1e-6)
    # Sample 2's three learned tokens, padded and packed: the same sample.
    torch.testing.assert_close(pack_c, pad_c, rtol=0, atol=1e-5)
    for got, want in zip(grads_c, grads_w, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_a_model_whose_forward_changes_its_logits_keeps_its_own_forward(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, use_safetensors=True)
    model.config.final_logit_softcapping = 30.0  # Gemma-2's soft-capping
    own = model.forward
    assert not use_chunked_head(model) and not takes_chunked_head(model)
    assert model.forward == own
