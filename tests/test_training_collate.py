"""Tokenisation, masking, padding, truncation, skips and length grouping of samples."""

from __future__ import annotations

import math
import random

import pyarrow as pa
import pytest
import torch
from training_samples import sample_rows

from spag.data.tables import SAMPLE_SCHEMA
from spag.errors import SpagInputError
from spag.training.collate import (
    SKIP_EMPTY_TARGET,
    SKIP_TARGET_TOO_LONG,
    LengthGroupedSampler,
    SampleCollator,
    build_features,
    check_sample_table,
    encode_pairs,
    pad_token_id,
)
from spag.training.losses import IGNORE_INDEX


def padding_fraction(lengths, order, batch_size: int) -> float:
    """Share of padded positions when ``order`` is cut into right-padded batches."""
    padded = real = 0
    for start in range(0, len(order), batch_size):
        batch = [lengths[i] for i in order[start : start + batch_size]]
        real += sum(batch)
        padded += max(batch) * len(batch)
    return 1.0 - real / padded


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


def _typed_set(n: int = 1200, seed: int = 3) -> tuple[list[int], list[bool]]:
    """1/3 short SFT rows and 2/3 long game rows, in random positions."""
    rng = random.Random(seed)
    is_sft = [i % 3 == 0 for i in range(n)]
    rng.shuffle(is_sft)
    lengths = [rng.randint(20, 120) if s else rng.randint(300, 900) for s in is_sft]
    return lengths, is_sft


def _batches(order: list[int], batch_size: int) -> list[list[int]]:
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _sft_counts(order: list[int], is_sft: list[bool], batch_size: int) -> list[int]:
    return [sum(is_sft[i] for i in b) for b in _batches(order, batch_size)]


def _mean_weights(order: list[int], is_sft: list[bool], batch_size: int) -> tuple[float, float]:
    """Mean over SFT (game) samples of the share 1/n_sft (1/n_game) a sample gets in its batch.

    The SPAG loss divides each term by its count in the batch, so this is a sample's
    weight in its term (before the coefficient a and the sample's own weight).
    """
    sft, game = [], []
    for b in _batches(order, batch_size):
        n_sft = sum(is_sft[i] for i in b)
        for i in b:
            (sft if is_sft[i] else game).append(1.0 / (n_sft if is_sft[i] else len(b) - n_sft))
    return sum(sft) / len(sft), sum(game) / len(game)


def _hypergeom(total: int, good: int, draws: int) -> list[float]:
    """P(k good) among ``draws`` drawn without replacement, k = 0..draws."""
    c = math.comb
    return [c(good, k) * c(total - good, draws - k) / c(total, draws) for k in range(draws + 1)]


def _random_batching_weights(n: int, n_sft: int, batch_size: int) -> tuple[float, float]:
    """Exact expected 1/n_sft (1/n_game) of a sample's batch when batches are drawn at random."""
    # The other batch_size - 1 members are drawn from the n - 1 other samples.
    p_sft = _hypergeom(n - 1, n_sft - 1, batch_size - 1)
    p_game = _hypergeom(n - 1, n - n_sft - 1, batch_size - 1)
    return (
        sum(p / (1 + k) for k, p in enumerate(p_sft)),
        sum(p / (1 + k) for k, p in enumerate(p_game)),
    )


@pytest.mark.parametrize("batch_size", [2, 8])
def test_typed_sampler_gives_sft_and_game_their_random_batching_weights(batch_size):
    # Length grouping alone would put the short SFT rows together and the long game rows
    # together (all-SFT or all-game batches), changing each term's per-sample weight.
    lengths, is_sft = _typed_set()
    n, n_sft = len(lengths), sum(is_sft)
    want_sft, want_game = _random_batching_weights(n, n_sft, batch_size)
    sampler = LengthGroupedSampler(lengths, batch_size, seed=11, is_sft=is_sft)
    got = []
    for epoch in range(4):
        sampler.set_epoch(epoch)
        got.append(_mean_weights(sampler.order(), is_sft, batch_size))
    got_sft = sum(w for w, _ in got) / len(got)
    got_game = sum(w for _, w in got) / len(got)
    # Over 4 epochs, random batching itself strays up to about 2% from these values here.
    assert got_sft == pytest.approx(want_sft, rel=0.05)
    assert got_game == pytest.approx(want_game, rel=0.05)
    assert got_sft / got_game == pytest.approx(want_sft / want_game, rel=0.05)


def test_typed_sampler_batches_hold_the_random_batching_mix():
    lengths, is_sft = _typed_set()
    n, n_sft, batch_size = len(lengths), sum(is_sft), 8
    sampler = LengthGroupedSampler(lengths, batch_size, seed=5, is_sft=is_sft)
    counts = []
    for epoch in range(4):
        sampler.set_epoch(epoch)
        counts.extend(_sft_counts(sampler.order(), is_sft, batch_size))
    # The SFT count of a random batch of 8 is hypergeometric (mean 8/3): its histogram
    # over our batches is within 0.1 of that law in total variation (length grouping
    # alone gives about 0.95: nearly every batch is all-SFT or all-game).
    want = _hypergeom(n, n_sft, batch_size)
    got = [counts.count(k) / len(counts) for k in range(batch_size + 1)]
    assert 0.5 * sum(abs(a - b) for a, b in zip(got, want, strict=True)) <= 0.10
    # And so the share of SFT rows per batch stays near the overall third: at least
    # 80% of batches hold 1 to 4 SFT rows of 8 (a random batch does with p = 0.87;
    # length grouping alone, about 1%).
    assert sum(1 <= c <= 4 for c in counts) / len(counts) >= 0.80
    assert sum(counts) / len(counts) == pytest.approx(batch_size * n_sft / n)


def test_typed_sampler_is_a_seeded_permutation_and_groups_each_type_by_length():
    lengths, is_sft = _typed_set(n=1003)  # a short last batch too
    batch_size = 8
    sampler = LengthGroupedSampler(lengths, batch_size, seed=7, is_sft=is_sft)
    order = list(sampler)
    assert sorted(order) == list(range(len(lengths)))  # every index exactly once
    assert list(sampler) == order  # same seed and epoch: same order (resume relies on it)
    again = LengthGroupedSampler(lengths, batch_size, seed=7, is_sft=is_sft)
    assert again.order() == order  # a new process resuming gets it too
    sampler.set_epoch(1)
    assert list(sampler) != order
    assert sorted(sampler.order()) == list(range(len(lengths)))
    assert len(_batches(order, batch_size)[-1]) == len(lengths) % batch_size
    # Mixed batches must pad their short SFT rows to the game rows' length, but within
    # each type a batch's rows are of similar length, so padding stays well below random.
    random_order = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(0))
    grouped = padding_fraction(lengths, order, batch_size)
    assert grouped < 0.8 * padding_fraction(lengths, random_order.tolist(), batch_size)
    for kind in (True, False):
        spreads = [
            max(lengths[i] for i in b if is_sft[i] == kind)
            - min(lengths[i] for i in b if is_sft[i] == kind)
            for b in _batches(order, batch_size)
            if any(is_sft[i] == kind for i in b)
        ]
        full_range = 100 if kind else 600
        assert sorted(spreads)[len(spreads) // 2] <= 0.1 * full_range  # median spread


def test_untyped_sampler_order_is_unchanged_by_the_typed_option():
    # Imitation groups all rows by length alone, as before.
    lengths, is_sft = _typed_set(n=600)
    plain = LengthGroupedSampler(lengths, 4, seed=2).order()
    one_type = LengthGroupedSampler(lengths, 4, seed=2, is_sft=[False] * 600).order()
    assert plain == one_type
    assert plain != LengthGroupedSampler(lengths, 4, seed=2, is_sft=is_sft).order()


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


@pytest.mark.parametrize(
    "column,value,message",
    [
        ("weight", -0.5, r"'weight' is negative in row 1 \(-0.5\)"),
        ("reward", 1e30, r"'reward' is 1e\+30 in row 1, beyond"),
        ("ref_logprob", 0.7, r"'ref_logprob' is 0.7 in row 1: a mean log-probability"),
    ],
)
def test_impossible_samples_are_refused(column, value, message):
    """Values that would train silently on nonsense (a loss of -1e29, an inf gradient)."""
    rows = [dict(r, ref_logprob=-1.0) for r in sample_rows(4)]
    rows[1][column] = value
    table = _table([{k: v for k, v in r.items() if k != "ref_logprob"} for r in rows])
    table = table.append_column("ref_logprob", pa.array([r["ref_logprob"] for r in rows]))
    with pytest.raises(SpagInputError, match=message):
        check_sample_table(table, "s.parquet", need_ref=True)
    rows[1][column] = {"weight": 0.0, "reward": -3.0, "ref_logprob": -0.0}[column]
    good = _table([{k: v for k, v in r.items() if k != "ref_logprob"} for r in rows])
    good = good.append_column("ref_logprob", pa.array([r["ref_logprob"] for r in rows]))
    check_sample_table(good, "s.parquet", need_ref=True)


def test_every_batch_says_which_game_each_sample_came_from(tokenizer):
    """An objective can group a batch's samples by game (e.g. a GRPO-like advantage
    normalised within a game) with no change to the data path: ``batch["episode"]``."""
    rows = sample_rows(8)
    rows[1]["episode_id"] = rows[0]["episode_id"]  # two messages of one game
    features, _ = build_features(_table(rows), tokenizer, 256, "s.parquet", with_ref=False)
    batch = SampleCollator(pad_id=0)(features)
    episodes = batch["episode"].tolist()
    assert episodes[0] == episodes[1] >= 0
    assert len({e for e, r in zip(episodes, rows, strict=True) if r["episode_id"]}) == 5
    assert [e for e, r in zip(episodes, rows, strict=True) if r["type"] == "sft"] == [-1, -1]
