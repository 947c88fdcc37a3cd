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

    backend.generate(["hi there"], replace(sampled, temperature=0.0), seed=3)
    (greedy,) = _FakeLLM.last["params"]
    assert greedy["temperature"] == 0.0 and greedy["top_k"] == 0  # no filter when greedy
    assert greedy["min_tokens"] == 2  # a reply's minimum holds in greedy decoding too

    # The minimum as set, and never above the reply's maximum (vLLM refuses that).
    backend.generate(["hi there"], replace(sampled, min_new_tokens=1), seed=3)
    assert _FakeLLM.last["params"][0]["min_tokens"] == 1
    backend.generate(["hi there"], replace(sampled, max_new_tokens=3, min_new_tokens=5), seed=3)
    assert _FakeLLM.last["params"][0]["min_tokens"] == 3


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


@pytest.fixture
def torch_claiming_cuda(monkeypatch):
    """This CPU build of torch made to claim a CUDA 13.0 build on a node whose driver
    supports CUDA 13.0 with one GPU (NVML). The CUDA runtime's device count, which runs
    ``cuInit`` in this process, records that it ran: a vLLM engine forked after it
    cannot use CUDA."""
    import torch

    import spag.ops.device as device

    cuinit: list[str] = []

    def runtime_device_count() -> int:
        cuinit.append("cudaGetDeviceCount")
        return 1

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", runtime_device_count, raising=False)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 1)
    monkeypatch.setattr(device, "driver_cuda_version", lambda: "13.0")
    monkeypatch.setattr(device, "nvml_device_count", lambda: 1, raising=False)
    # What a job starts with; the check may set it to 1, the fixture restores it.
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "0")
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "0")
    return cuinit


def test_a_vllm_shard_starts_its_engine_with_no_cuda_in_the_job_process(
    fake_vllm, torch_claiming_cuda, tiny_model_dir, tmp_path
):
    """`spag play --backend vllm --device cuda` checks the GPU without initialising CUDA
    in its own process, so that vLLM's forked engine core can use it."""
    import pyarrow.parquet as pq

    from spag.cli import main

    class EngineStandIn(_FakeLLM):
        def __init__(self, **opts):
            if torch_claiming_cuda:
                # What vLLM 0.33 reports when its forked engine core finds CUDA
                # initialised in the parent.
                raise RuntimeError("Engine core initialization failed")
            super().__init__(**opts)
            _FakeLLM.last["env"] = {
                k: os.environ.get(k)
                for k in ("PYTORCH_NVML_BASED_CUDA_CHECK", "VLLM_BATCH_INVARIANT")
            }

    fake_vllm.LLM = EngineStandIn
    words = tmp_path / "words.txt"
    words.write_text("river\nbridge\n")
    out = tmp_path / "shard.parquet"
    rc = main(["play", "--model", str(tiny_model_dir), "--words", str(words), "--output",
               str(out), "--backend", "vllm", "--device", "cuda", "--max-turns", "1",
               "--max-new-tokens", "4", "--no-progress", "--no-journal",
               "--vllm-batch-invariant"])  # fmt: skip
    assert rc == 0
    assert torch_claiming_cuda == []
    assert pq.read_table(out).num_rows == 2
    assert _FakeLLM.last["env"] == {
        "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
        "VLLM_BATCH_INVARIANT": "1",
    }


@pytest.mark.parametrize("probe", [False, True])
def test_a_driver_older_than_the_build_is_named_with_its_minimum(
    torch_claiming_cuda, monkeypatch, probe
):
    import spag.ops.device as device
    from spag.errors import SpagInputError

    monkeypatch.setattr(device, "driver_cuda_version", lambda: "12.4")
    with pytest.raises(SpagInputError) as err:
        device.select_device("cuda", "spag play", probe=probe)
    text = str(err.value)
    assert "the driver is too old" in text
    assert "built for CUDA 13.0" in text and "driver supports CUDA 12.4" in text
    assert "R580 or newer" in text and "cuda_build: cu12" in text
    assert torch_claiming_cuda == []  # decided before any CUDA call


def test_no_visible_gpu_is_refused_without_initialising_cuda(torch_claiming_cuda, monkeypatch):
    import spag.ops.device as device

    monkeypatch.setattr(device, "nvml_device_count", lambda: 0)
    assert "no GPU is visible" in device.cuda_problem(probe=False)
    assert device.select_device("auto", "spag play", probe=False) == "cpu"
    assert torch_claiming_cuda == []


class _FakeNvml:
    """libnvidia-ml as far as the device check calls it: 4 GPUs of 80 GiB."""

    def __init__(self) -> None:
        self.shut = 0

    def nvmlInit_v2(self):
        return 0

    def nvmlShutdown(self):
        self.shut += 1
        return 0

    def nvmlDeviceGetCount_v2(self, ref):
        ref._obj.value = 4
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, i, ref):
        ref._obj.value = i + 1
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle, ref):
        ref._obj.total = 80 * 1024**3
        return 0

    def nvmlDeviceGetName(self, handle, buffer, size):
        buffer.value = b"NVIDIA H100"
        return 0


@pytest.mark.parametrize(
    "visible, count", [(None, 4), ("0,1", 2), ("", 0), ("-1", 0), ("0,1,2,3,4,5", 4)]
)
def test_nvml_counts_the_gpus_this_job_may_use(monkeypatch, visible, count):
    import spag.ops.device as device

    lib = _FakeNvml()
    monkeypatch.setattr(device.ctypes, "CDLL", lambda name: lib)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert device.nvml_device_count() == count
    listed = device.nvml_devices()
    assert [d["name"] for d in listed] == ["NVIDIA H100"] * 4
    assert listed[0]["memory_gib"] == 80.0
    assert lib.shut == 2  # NVML shut down after each call


def test_vllm_calls_are_sent_in_waves_the_engine_cache_holds(fake_vllm, tiny_model_dir):
    """Games go to vLLM in waves that fit its KV cache at full length (the shared rules
    counted once), in the call's order; replies come back in that order."""
    from spag.generation import load_backend
    from spag.generation.vllm_backend import cache_waves

    # 11 blocks of 4 tokens, one held back by vLLM; a shared 8-token prefix is 2 blocks:
    # games of 6 own tokens + 2 new tokens take 2 blocks each, so 4 games fit a wave.
    prefix = list(range(100, 108))
    prompts = [prefix + [i] * 6 for i in range(9)]
    assert cache_waves(prompts, 2, (11, 4)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    assert cache_waves(prompts, 2, (10, 4)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert cache_waves(prompts, 2, None) == [list(range(9))]
    assert cache_waves([[1] * 60], 4, (10, 4)) == [[0]]  # too large: alone
    assert cache_waves([], 2, (10, 4)) == []

    calls = []

    class Engine(_FakeLLM):
        def __init__(self, **opts):
            super().__init__(**opts)
            cache = types.SimpleNamespace(num_gpu_blocks=12, block_size=16)
            self.llm_engine = types.SimpleNamespace(
                vllm_config=types.SimpleNamespace(cache_config=cache)
            )

        def generate(self, requests, params, use_tqdm=False):
            calls.append(len(requests))
            return [
                types.SimpleNamespace(outputs=[_Completion(text=f"r{p['seed']}")]) for p in params
            ]

    fake_vllm.LLM = Engine
    backend = load_backend("vllm", tiny_model_dir, **LOCAL, max_length=256)
    texts = [f"The rules are short. Game {i} says " + "word " * (5 + i) for i in range(7)]
    sampling = Sampling(max_new_tokens=16, temperature=1.2, top_p=1.0, top_k=50)
    replies = backend.generate(texts, sampling, seed=3, game_ids=[f"g{i}" for i in range(7)])
    encoded = [ids for ids, _ in backend.encoder.encode(texts, 256 - 16)]
    assert calls == [len(w) for w in cache_waves(encoded, 16, (12, 16))]
    assert len(calls) > 1 and sum(calls) == 7
    from spag.generation.base import prompt_seeds

    seeds = prompt_seeds(3, [f"g{i}" for i in range(7)], 7)
    assert [r.text for r in replies] == [f"r{s}" for s in seeds]  # the call's order
