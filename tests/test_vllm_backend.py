"""The vllm backend on a real GPU (skipped where CUDA or vLLM is missing)."""

from __future__ import annotations

import pytest

from spag.game.settings import GameSettings
from spag.generation.settings import Sampling

pytestmark = pytest.mark.gpu

PROMPTS = ["The game has just started. You are the attacker.", "hi", "a river and a bridge"]


@pytest.fixture(scope="module")
def gpu_model_dir(tmp_path_factory):
    """A tiny Llama whose head size vLLM's attention kernels accept (64)."""
    pytest.importorskip("vllm", reason="vllm is not installed (conda env envs/vllm.yaml)")
    from conftest import DATA

    from spag.models.tiny import build_tiny_model

    corpus = sorted(p for p in DATA.glob("*") if p.suffix in (".json", ".yaml", ".txt"))
    out = tmp_path_factory.mktemp("gpu") / "model"
    return build_tiny_model(
        corpus, out, hidden_size=256, intermediate_size=512, num_layers=2, num_heads=4, seed=0
    )


@pytest.fixture(scope="module")
def backend(gpu_model_dir):
    from spag.generation import load_backend

    return load_backend(
        "vllm",
        gpu_model_dir,
        prompt_format=GameSettings.prompt_format,
        trust_remote_code=False,
        tensor_parallel_size=1,
        seed=0,
        gpu_memory_utilization=0.3,
        max_length=1024,
    )


def _gen(backend, prompts, *, seed=5, **kw):
    sampling = Sampling(**{**dict(max_new_tokens=16, top_k=0), **kw})
    return backend.generate(prompts, sampling, seed=seed)


def test_vllm_replies_are_seeded_and_bounded(backend):
    a = _gen(backend, PROMPTS)
    b = _gen(backend, PROMPTS)
    assert a == b
    assert len(a) == len(PROMPTS)
    for r in a:
        assert 2 <= r.num_tokens <= 16
        assert r.finished_by_eos or r.num_tokens == 16


def test_vllm_greedy_matches_hf_first_tokens(backend, gpu_model_dir):
    from spag.generation import load_backend

    hf = load_backend(
        "hf",
        gpu_model_dir,
        prompt_format=GameSettings.prompt_format,
        trust_remote_code=False,
        max_length=1024,
        dtype="float32",
    )
    v = _gen(backend, PROMPTS, temperature=0.0, max_new_tokens=4)
    h = _gen(hf, PROMPTS, temperature=0.0, max_new_tokens=4)
    # Same token ids in: at least the first greedy tokens agree in most prompts.
    same = sum(x.text[:3] == y.text[:3] for x, y in zip(v, h, strict=True))
    assert same >= 2


def test_vllm_play_cli_writes_a_shard(gpu_model_dir, tmp_path):
    import pyarrow.parquet as pq

    from spag.cli import main

    words = tmp_path / "words.txt"
    words.write_text("apple\nriver\n", encoding="utf-8")
    out = tmp_path / "shard_000.parquet"
    rc = main(
        [
            "play",
            "--backend",
            "vllm",
            "--model",
            str(gpu_model_dir),
            "--words",
            str(words),
            "--output",
            str(out),
            "--max-turns",
            "2",
            "--max-new-tokens",
            "8",
            "--gpu-memory-utilization",
            "0.3",
            "--max-length",
            "1024",
            "--no-progress",
        ]
    )
    assert rc == 0
    assert pq.read_table(out).num_rows == 2
