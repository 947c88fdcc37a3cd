"""What only a GPU engine shows, checked on CPU with a stand-in ``vllm`` module: the
process layout of a CUDA job (no CUDA initialised before vLLM forks its engine core), the
device check, and the GPUs an engine spans. Everything a CPU engine can show runs against
the real one (tests/test_vllm_backend.py)."""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from spag.game.settings import GameSettings

# What spag play gives a local vllm backend besides the model.
LOCAL = dict(
    prompt_format=GameSettings.prompt_format,
    trust_remote_code=False,
    tensor_parallel_size=1,
    seed=0,
    device="cuda",
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
    module.__version__ = "0.33.0"
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: False)  # a GPU build
    module.platforms = platforms
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    return module


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
            # the family left on CPU takes the head sizes of vLLM's CPU attention only
            "base_model": {"tiny": {"head_dim": 64}},
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
