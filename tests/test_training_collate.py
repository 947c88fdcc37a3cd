"""Tokenisation, masking, padding, truncation, skips and length grouping of samples."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
import torch
from spag.errors import SpagInputError
from spag.tables import SAMPLE_SCHEMA
from spag.training.collate import (
    SKIP_EMPTY_TARGET,
    SKIP_TARGET_TOO_LONG,
    LengthGroupedSampler,
    SampleCollator,
    build_features,
    check_sample_table,
    encode_pairs,
    pad_token_id,
    padding_fraction,
)
from spag.training.losses import IGNORE_INDEX
from training_samples import sample_rows


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_layout_is_bos_query_target_eos(tokenizer):
    q, t = "tell me about the kitchen", "it is round"
    (enc,), report = encode_pairs(tokenizer, [q], [t], max_length=512)
    ids, start = enc
    assert ids == [
        tokenizer.bos_token_id,
        *_ids(tokenizer, q),
        *_ids(tokenizer, t),
        tokenizer.eos_token_id,
    ]
    assert start == 1 + len(_ids(tokenizer, q))
    assert report.total == 0 and report.truncated == 0


def test_left_truncation_keeps_bos_target_and_newest_query_tokens(tokenizer):
    q, t = " ".join(["the game starts now"] * 20), "a pan"
    q_ids, t_ids = _ids(tokenizer, q), _ids(tokenizer, t)
    max_length = len(t_ids) + 2 + 5
    (enc,), report = encode_pairs(tokenizer, [q], [t], max_length=max_length)
    ids, start = enc
    assert len(ids) == max_length
    assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
    assert ids[1:start] == q_ids[-5:]
    assert ids[start:-1] == t_ids
    assert report.truncated == 1


def test_empty_and_too_long_targets_are_counted_skips(tokenizer):
    long_target = " ".join(["kitchen metal"] * 30)
    encoded, report = encode_pairs(
        tokenizer,
        ["q one", "q two", "q three", "q four"],
        ["fine", "", "   ", long_target],
        max_length=16,
    )
    assert encoded[0] is not None and encoded[1:] == [None, None, None]
    assert report.rows == {SKIP_EMPTY_TARGET: [1, 2], SKIP_TARGET_TOO_LONG: [3]}
    assert report.total == 3


def test_collator_pads_right_with_eos_and_masks_query_and_padding(tokenizer):
    vocab_before = len(tokenizer)
    assert tokenizer.pad_token_id is None  # the tiny tokenizer has none, as Llama's
    pad = pad_token_id(tokenizer)
    assert pad == tokenizer.eos_token_id and len(tokenizer) == vocab_before
    feats = [
        {
            "input_ids": [1, 10, 11, 12, 2],
            "target_start": 3,
            "reward": 0.5,
            "weight": 2.0,
            "is_sft": False,
            "ref_logprob": -1.0,
        },
        {
            "input_ids": [1, 20, 2],
            "target_start": 2,
            "reward": 1.0,
            "weight": 1.0,
            "is_sft": True,
            "ref_logprob": -2.0,
        },
    ]
    batch = SampleCollator(pad)(feats)
    assert batch["input_ids"].tolist() == [[1, 10, 11, 12, 2], [1, 20, 2, pad, pad]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    m = IGNORE_INDEX
    assert batch["labels"].tolist() == [[m, m, m, 12, 2], [m, m, 2, m, m]]
    assert batch["is_sft"].tolist() == [False, True]
    assert batch["ref_logprob"].tolist() == [-1.0, -2.0]
    assert batch["weight"].dtype == torch.float32


def test_sampler_is_a_seeded_permutation_with_little_padding():
    rng = random.Random(1)
    lengths = [rng.randint(20, 900) for _ in range(1000)]
    sampler = LengthGroupedSampler(lengths, batch_size=2, seed=7)
    order = list(sampler)
    assert sorted(order) == list(range(1000))
    assert list(sampler) == order  # same seed and epoch: same order (resume relies on it)
    sampler.set_epoch(1)
    assert list(sampler) != order
    random_order = torch.randperm(1000, generator=torch.Generator().manual_seed(0)).tolist()
    grouped = padding_fraction(lengths, order, 2)
    assert grouped <= 0.10
    assert padding_fraction(lengths, random_order, 2) > 3 * grouped


def test_sampler_keeps_batch_boundaries_with_a_short_last_batch():
    lengths = list(range(1, 12))  # 11 samples, batch 3: the short batch must come last
    order = LengthGroupedSampler(lengths, batch_size=3, seed=0, group_size=6).order()
    batches = [order[i : i + 3] for i in range(0, len(order), 3)]
    assert len(batches[-1]) == 2
    for b in batches:  # each batch comes from one sorted group: spread smaller than a group's
        assert max(lengths[i] for i in b) - min(lengths[i] for i in b) <= 5


def _table(rows):
    return pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)


def test_sample_table_errors_name_the_column_and_row(tmp_path):
    rows = sample_rows(4)
    with pytest.raises(SpagInputError, match="missing column 'ref_logprob'"):
        check_sample_table(_table(rows), "s.parquet", need_ref=True)
    with pytest.raises(SpagInputError, match="missing column 'target'"):
        check_sample_table(_table(rows).drop_columns(["target"]), "s.parquet", need_ref=False)
    bad = [dict(r) for r in rows]
    bad[2]["query"] = None
    with pytest.raises(SpagInputError, match="'query' is null .* first row 2"):
        check_sample_table(_table(bad), "s.parquet", need_ref=False)
    bad = [dict(r) for r in rows]
    bad[1]["type"] = "play"
    with pytest.raises(SpagInputError, match="row 1 has 'play'"):
        check_sample_table(_table(bad), "s.parquet", need_ref=False)


def test_build_features_refuses_missing_scores_and_an_all_skipped_table(tokenizer):
    rows = sample_rows(4)
    table = _table(rows).append_column(
        "ref_logprob", pa.array([-1.0, None, -1.0, -1.0], pa.float64())
    )
    with pytest.raises(SpagInputError, match="'ref_logprob' is missing .* row 1"):
        build_features(table, tokenizer, 256, "s.parquet", with_ref=True)
    empty = [dict(r, target="") for r in rows]
    with pytest.raises(SpagInputError, match="every sample was skipped"):
        build_features(_table(empty), tokenizer, 256, "s.parquet", with_ref=False)
