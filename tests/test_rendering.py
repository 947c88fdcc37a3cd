"""One rendering of prompts for play, training and scoring: raw and chat formats,
on the tiny tokenizer and on SmolLM2's (a real tokenizer without a BOS of its own)."""

from __future__ import annotations

import pytest

from spag.errors import SpagInputError
from spag.models.rendering import PromptRenderer
from spag.training.collate import encode_pairs

# A ChatML-like template for the tiny tokenizer, made of its own special tokens.
TINY_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"
)


@pytest.fixture
def tiny_tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def smol_tok(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_raw_rendering_is_the_text_with_one_bos_where_the_tokenizer_adds_one(tiny_tok):
    r = PromptRenderer(tiny_tok, "raw")
    assert r.render("hello") == "hello"
    ((ids, _),) = r.encode(["hello there"], 100)
    assert ids == tiny_tok("hello there").input_ids  # the tokenizer's own encoding
    assert ids.count(tiny_tok.bos_token_id) == 1 and r.end_id == tiny_tok.eos_token_id


def test_chat_rendering_on_the_tiny_tokenizer_has_one_bos_and_eos_ends_the_turn(tiny_tok):
    tiny_tok.chat_template = TINY_TEMPLATE
    r = PromptRenderer(tiny_tok, "chat")
    text = r.render("hello there")
    assert text.startswith(tiny_tok.bos_token) and text.endswith("[assistant] ")
    ((ids, _),) = r.encode(["hello there"], 200)
    # The template writes BOS and the tokenizer adds one: still exactly one.
    assert ids[0] == tiny_tok.bos_token_id and ids.count(tiny_tok.bos_token_id) == 1
    assert r.end_id == tiny_tok.eos_token_id


def test_chat_without_a_template_is_a_clear_error(tiny_tok):
    tiny_tok.chat_template = None
    with pytest.raises(SpagInputError, match="no chat template"):
        PromptRenderer(tiny_tok, "chat", source="results/base_model")
    with pytest.raises(SpagInputError, match="unknown prompt format"):
        PromptRenderer(tiny_tok, "markdown")


def test_smollm2_raw_has_no_bos_and_ends_with_its_eos(smol_tok):
    r = PromptRenderer(smol_tok, "raw")
    # Its BOS is <|im_start|>, which the tokenizer never puts in front of a text.
    assert r.bos_id is None
    ((ids, _),) = r.encode(["hello there"], 100)
    assert ids == smol_tok("hello there", add_special_tokens=False).input_ids
    assert smol_tok.convert_ids_to_tokens(r.end_id) == "<|im_end|>"


def test_smollm2_chat_prompt_is_the_template_with_one_start_and_the_turn_end(smol_tok):
    r = PromptRenderer(smol_tok, "chat")
    text = r.render("Your move.")
    assert text == smol_tok.apply_chat_template(
        [{"role": "user", "content": "Your move."}], tokenize=False, add_generation_prompt=True
    )
    ((ids, _),) = r.encode(["Your move."], 500)
    assert ids == smol_tok(text, add_special_tokens=False).input_ids
    start = smol_tok.convert_tokens_to_ids("<|im_start|>")
    assert ids[0] == start and ids[1] != start  # the template's own start, not doubled
    assert smol_tok.convert_ids_to_tokens(r.end_id) == "<|im_end|>"
    assert r.stop_ids()[0] == r.end_id


@pytest.mark.parametrize("fmt", ["raw", "chat"])
def test_training_query_tokens_are_the_play_prompt_tokens(smol_tok, fmt):
    """Train and play must see the same tokens: the query part of a training sample is
    exactly the encoded play prompt, and the target ends with the turn's end token."""
    r = PromptRenderer(smol_tok, fmt)
    query, target = "The game has just started. Your move.", "Think of something cold."
    (enc,), report = encode_pairs(smol_tok, [query], [target], 512, prompt_format=fmt)
    ids, start = enc
    ((play_ids, _),) = r.encode([query], 512)
    assert ids[:start] == play_ids
    assert ids[start:-1] == smol_tok(target, add_special_tokens=False).input_ids
    assert ids[-1] == r.end_id and report.total == 0


def test_chat_training_truncation_keeps_the_start_and_the_assistant_cue(smol_tok):
    query = " ".join(["river"] * 300)
    (enc,), report = encode_pairs(smol_tok, [query], ["ok then"], 64, prompt_format="chat")
    ids, start = enc
    assert len(ids) == 64 and report.truncated == 1
    cue = smol_tok("<|im_start|>assistant\n", add_special_tokens=False).input_ids
    assert ids[start - len(cue) : start] == cue  # the most recent tokens survive
