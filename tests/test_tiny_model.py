"""The embedded tiny Llama: a normal Hugging Face folder with a Llama-like tokenizer."""

from __future__ import annotations

import json

import pytest

from spag.errors import SpagInputError
from spag.models.tiny import build_tiny_model

TEXT = "The attacker gives a clue about the river, and the defender thinks carefully."


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    return tok, model


def test_folder_is_a_safetensors_checkpoint(tiny_model_dir):
    names = {p.name for p in tiny_model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= names
    assert not any(n.endswith((".bin", ".pt")) for n in names)
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert "auto_map" not in config  # loads without remote code


def test_tokenizer_adds_exactly_one_bos_and_no_eos(loaded):
    tok, _ = loaded
    ids = tok(TEXT)["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert ids.count(tok.bos_token_id) == 1
    assert tok.eos_token_id not in ids
    assert tok.bos_token_id not in tok(TEXT, add_special_tokens=False)["input_ids"]


def test_special_tokens_like_llama(loaded):
    tok, model = loaded
    assert tok.pad_token is None
    assert tok.eos_token == "</s>" and tok.bos_token == "<s>"
    assert tok.eos_token_id != tok.bos_token_id
    assert model.config.eos_token_id == tok.eos_token_id
    assert model.config.bos_token_id == tok.bos_token_id
    assert model.generation_config.pad_token_id == tok.eos_token_id
    assert model.config.vocab_size == len(tok)


def test_round_trip_of_ordinary_text(loaded):
    tok, _ = loaded
    for text in [
        TEXT,
        "I know the word! It is kettle!",
        "Caf\u00e9 prices rose 7% in 2024 \u2014 ok?",
    ]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text


def test_shipped_data_gives_a_useful_vocabulary(loaded):
    tok, _ = loaded
    # The BPE vocabulary learned frequent English pieces, not single bytes.
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert len(ids) < len(TEXT) / 2


def test_generation_runs(loaded):
    import torch

    tok, model = loaded
    enc = tok([TEXT], return_tensors="pt")
    torch.manual_seed(0)
    out = model.generate(**enc, max_new_tokens=6, do_sample=True, pad_token_id=tok.eos_token_id)
    n = enc["input_ids"].shape[1]
    assert n < out.shape[1] <= n + 6
    assert out[0, :n].tolist() == enc["input_ids"][0].tolist()


def test_build_is_deterministic_for_a_seed(tmp_path):
    from safetensors.torch import load_file

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a small corpus of words for a small tokenizer\n" * 20)
    kw = dict(
        vocab_size=300,
        hidden_size=16,
        intermediate_size=32,
        num_layers=1,
        num_heads=2,
        max_position_embeddings=64,
    )
    a = build_tiny_model([corpus], tmp_path / "a", seed=1, **kw)
    b = build_tiny_model([corpus], tmp_path / "b", seed=1, **kw)
    c = build_tiny_model([corpus], tmp_path / "c", seed=2, **kw)
    wa, wb, wc = (load_file(p / "model.safetensors") for p in (a, b, c))
    assert all((wa[k] == wb[k]).all() for k in wa)
    assert any((wa[k] != wc[k]).any() for k in wa)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()


def test_build_errors(tmp_path):
    with pytest.raises(SpagInputError, match="not found"):
        build_tiny_model([tmp_path / "missing.txt"], tmp_path / "m", seed=0)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(SpagInputError, match="corpus is empty"):
        build_tiny_model([empty], tmp_path / "m", seed=0)
    assert not (tmp_path / "m").exists()
