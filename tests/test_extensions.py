"""DeepSpeed's compiled ops (CPU Adam, the CPU's shared-memory collectives): built per node
and CPU type, under a kernel lock that outlives no killed build, and refused with the
setting's name when the tools are missing."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from spag.errors import SpagInputError
from spag.training.distributed import resolve_deepspeed
from spag.training.extensions import (
    CPU_ADAM,
    SHM_COMM,
    build_ops,
    build_tools_problem,
    extensions_dir,
    needed_ops,
    use_node_extensions_dir,
)

pytest.importorskip("deepspeed")


def test_the_folder_is_per_node_and_cpu_type(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = extensions_dir()
    assert path.is_relative_to(tmp_path / "spag" / "torch_extensions")
    node = path.parent.name
    assert node.startswith(socket.gethostname().split(".")[0] + "-")
    assert path.name.startswith(f"py{sys.version_info.major}{sys.version_info.minor}-torch")
    # use_node_extensions_dir sets it for this process: set then deleted here, so that it is
    # unset again after the test (else every later job builds CPU Adam in this tmp_path)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "")
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    assert use_node_extensions_dir() == path and os.environ["TORCH_EXTENSIONS_DIR"] == str(path)
    # a user's own folder wins
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "mine"))
    assert use_node_extensions_dir() == tmp_path / "mine"


def test_only_an_offloaded_optimizer_needs_cpu_adam():
    # on the CPU accelerator (this machine) every DeepSpeed run loads its collectives
    assert needed_ops(resolve_deepspeed("zero3_offload")) == [SHM_COMM, CPU_ADAM]
    assert needed_ops(resolve_deepspeed("zero3")) == [SHM_COMM]
    assert needed_ops(None) == []


def test_missing_tools_are_named(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no ninja, no compiler
    assert "ninja is not installed" in build_tools_problem()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    with pytest.raises(SpagInputError, match=r"deepspeed: zero3_offload: CPUAdamBuilder must"):
        build_ops([CPU_ADAM], setting="deepspeed: zero3_offload")


def test_missing_compiler_is_named(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-c++")
    assert "no C++ compiler 'no-such-c++'" in (build_tools_problem() or "")


@pytest.mark.deepspeed
@pytest.mark.parametrize("op, folder", [(CPU_ADAM, "cpu_adam"), (SHM_COMM, "deepspeed_shm_comm")])
def test_a_killed_builds_lock_does_not_block_the_next_job(op, folder, tmp_path):
    """torch's build lock is a plain file: a killed build leaves it and every later build
    waits on it forever. Under the node lock it is known stale and removed; DeepSpeed's
    own later load (here the collectives' at engine start) then finds the op loaded and
    takes no lock file, so one left behind meanwhile stops nothing."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    env["DS_ACCELERATOR"] = "cpu"
    # The op built (or loaded) in this node's folder, then copied into a cache of the
    # test's own, where no other job's build takes or drops a lock file meanwhile.
    build = f"from spag.training.extensions import build_ops\nbuild_ops([{op!r}])\n"
    proc = subprocess.run(
        [sys.executable, "-c", build], capture_output=True, text=True, timeout=900, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    own = tmp_path / "cache" / extensions_dir().relative_to(cache)
    shutil.copytree(extensions_dir() / folder, own / folder, ignore=shutil.ignore_patterns("lock"))
    lock = own / folder / "lock"
    lock.write_text("")
    code = (
        "import logging, os, signal; logging.basicConfig(level=logging.INFO)\n"
        "from spag.training.extensions import build_ops\n"
        f"path = build_ops([{op!r}])[{op!r}]\n"
        f"open({str(lock)!r}, 'w').close()  # another job's, killed meanwhile\n"
        "signal.alarm(120)\n"
        "from deepspeed.accelerator import get_accelerator\n"
        f"get_accelerator().create_op_builder({op!r}).load()\n"
        f"os.unlink({str(lock)!r})\n"
        "print(path)\n"
    )
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "left by a killed build" in proc.stderr
    assert proc.stdout.strip() == str(own / folder / f"{folder}.so")
    assert not lock.exists()
