"""What the vllm backend asks vLLM for, checked on CPU with a stand-in ``vllm`` module:
token prompts from the shared renderer, and the sampling settings of the reference."""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from spag.game.settings import GameSettings
from spag.generation.settings import Sampling

# What spag play gives a local vllm backend besides the model.
LOCAL = dict(
    prompt_format=GameSettings.prompt_format,
    trust_remote_code=False,
    tensor_parallel_size=1,
    seed=0,
)


@dataclass
class _Completion:
    text: str = " ok "
    token_ids: list = field(default_factory=lambda: [5, 6])
    finish_reason: str = "stop"


class _FakeLLM:
    last: dict = {}

    def __init__(self, **opts):
        _FakeLLM.last = {"engine": opts}

    def generate(self, requests, params, use_tqdm=False):
        _FakeLLM.last.update(requests=requests, params=params)
        return [types.SimpleNamespace(outputs=[_Completion()]) for _ in requests]


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = _FakeLLM
    module.SamplingParams = lambda **kw: kw  # the keyword arguments are the request
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_vllm_requests_carry_top_k_and_the_rendered_tokens(fake_vllm, tiny_model_dir):
    from transformers import AutoTokenizer

    from spag.generation import load_backend
    from spag.models.rendering import PromptRenderer

    backend = load_backend("vllm", tiny_model_dir, **LOCAL, max_length=256)
    sampled = Sampling(max_new_tokens=16, temperature=1.2, top_p=1.0, top_k=50)
    replies = backend.generate(["hi there", "a river"], sampled, seed=3)
    assert [r.text for r in replies] == ["ok", "ok"]
    params = _FakeLLM.last["params"]
    assert [p["top_k"] for p in params] == [50, 50]
    assert all(p["temperature"] == 1.2 and p["min_tokens"] == 2 for p in params)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    expected = [ids for ids, _ in PromptRenderer(tok, "raw").encode(["hi there", "a river"], 240)]
    assert [r["prompt_token_ids"] for r in _FakeLLM.last["requests"]] == expected

    backend.generate(["hi there"], replace(sampled, greedy=True), seed=3)
    (greedy,) = _FakeLLM.last["params"]
    assert greedy["temperature"] == 0.0 and greedy["top_k"] == 0  # no filter when greedy


def test_vllm_request_seed_follows_the_game_not_its_batch_position(fake_vllm, tiny_model_dir):
    from spag.generation import load_backend

    backend = load_backend("vllm", tiny_model_dir, **LOCAL, max_length=256)
    sampled = Sampling(max_new_tokens=8, temperature=1.2, top_p=1.0, top_k=50)
    backend.generate(["a", "b", "c"], sampled, seed=9, game_ids=["e1", "e2", "e3"])
    together = {
        g: p["seed"] for g, p in zip(["e1", "e2", "e3"], _FakeLLM.last["params"], strict=True)
    }
    # e1 has finished: e2 and e3 move up in the batch, their seeds stay.
    backend.generate(["b", "c"], sampled, seed=9, game_ids=["e2", "e3"])
    later = {g: p["seed"] for g, p in zip(["e2", "e3"], _FakeLLM.last["params"], strict=True)}
    assert later == {g: together[g] for g in ("e2", "e3")}
    assert len(set(together.values())) == 3


STANDIN = Path(__file__).resolve().parent / "conda_standin"


def test_tensor_parallel_size_follows_the_rules_gpus(tmp_path):
    """The self-play rule's vLLM engine spans the job's GPUs unless the config says otherwise."""
    from workflow_utils import make_workdir, snakemake

    wd = make_workdir(tmp_path / "tp")
    for family, gpus, pinned, expected in (
        ("selfplay", 4, None, "4"),
        ("selfplay", 4, 2, "2"),
        ("evaluate", 2, None, "2"),
    ):
        config = {
            "selfplay": {"backend": "vllm", "tensor_parallel_size": pinned},
            "resources": {family: {"gpus": gpus}},
        }
        # the vLLM rules run in their conda env (a stand-in conda for the plan)
        res = snakemake(wd, "spag_epoch1", "-n", "-p", "--sdm", "conda", config=config,
                        env={"PATH": f"{STANDIN}{os.pathsep}{os.environ['PATH']}"})  # fmt: skip
        assert res.returncode == 0, res.stderr
        rule = "selfplay" if family == "selfplay" else "eval_play"
        lines = [
            line
            for line in res.stdout.splitlines()
            if "spag play" in line and ("--opponent" in line) == (rule == "eval_play")
        ]
        assert lines and all(f"--tensor-parallel-size {expected} " in line for line in lines)
