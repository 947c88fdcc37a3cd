"""DeepSpeed's compiled ops built once per node, safely.

DeepSpeed compiles its ops with ``-march=native`` the first time a run needs them, into
``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``): CPU Adam when the
optimizer is offloaded, and on the CPU accelerator the shared-memory collectives that
``deepspeed.comm`` loads at every start.
On a cluster that default is a home folder shared by nodes of different CPU types: a
library built on one node dies with an illegal instruction on another. And torch
guards the build with a lock *file* (``<dir>/cpu_adam/lock``) that a killed build
leaves behind (a job killed by its time limit mid-build, or while it loads): every
later job then waits on it forever.

Here the folder is per node and per CPU type (host name, a digest of the CPU's model
and flags, Python, torch and its CUDA), and the build runs under a kernel lock
(``flock``, released when its holder dies): whoever holds it knows that a remaining
lock file belongs to a dead build and removes it. Ranks of one node take turns; the
first builds, the others load what it built. DeepSpeed keeps each loaded op per process,
so its own later load of the same op takes no lock file again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import platform
import shutil
import socket
import sys
from pathlib import Path

from spag.errors import SpagInputError

log = logging.getLogger(__name__)

# DeepSpeed's builder names of the ops a shipped or user config may need.
CPU_ADAM = "CPUAdamBuilder"
# Loaded by deepspeed.comm at start where the accelerator has it (the CPU one):
# build_shm_op in deepspeed/comm/torch.py.
SHM_COMM = "ShareMemCommBuilder"


def _cpu_digest() -> str:
    """A digest of this CPU's model and instruction-set flags (what -march=native sees)."""
    model, flags = "", ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model", "cpu model") and not model:
                model = value.strip()
            elif key in ("flags", "Features", "isa") and not flags:
                flags = " ".join(sorted(value.split()))
    model = model or platform.processor()
    return hashlib.sha256(f"{platform.machine()}|{model}|{flags}".encode()).hexdigest()[:12]


def extensions_dir() -> Path:
    """The per-node, per-CPU-type folder of compiled torch extensions."""
    import torch

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    host = socket.gethostname().split(".")[0] or "host"
    cuda = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    tag = f"{py}-torch{torch.__version__.split('+')[0]}-{cuda}"
    return base / "spag" / "torch_extensions" / f"{host}-{_cpu_digest()}" / tag


def use_node_extensions_dir() -> Path:
    """Point ``TORCH_EXTENSIONS_DIR`` at :func:`extensions_dir` (a user's own setting wins)."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"])
    path = extensions_dir()
    path.mkdir(parents=True, exist_ok=True)
    os.environ["TORCH_EXTENSIONS_DIR"] = str(path)
    return path


def _comm_ops() -> list[str]:
    """The ops ``deepspeed.comm`` loads at start on this process's accelerator, under
    DeepSpeed's own condition."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder(SHM_COMM)
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return []
    return [SHM_COMM]


def needed_ops(deepspeed_config: str | None) -> list[str]:
    """The compiled ops a DeepSpeed run loads: the accelerator's communication op (on the
    CPU) and CPU Adam where the optimizer is offloaded."""
    if deepspeed_config is None:
        return []
    cfg = json.loads(Path(deepspeed_config).read_text())
    offload = (cfg.get("zero_optimization") or {}).get("offload_optimizer") or {}
    return _comm_ops() + ([CPU_ADAM] if offload.get("device") in ("cpu", "nvme") else [])


def build_tools_problem() -> str | None:
    """What is missing to compile an op (ninja, a C++ compiler), or None."""
    from torch.utils.cpp_extension import get_cxx_compiler, verify_ninja_availability

    try:
        verify_ninja_availability()
    except RuntimeError:
        return "ninja is not installed (it is in envs/train.yaml; else: pip install ninja)"
    cxx = get_cxx_compiler()
    if shutil.which(cxx) is None:
        return (
            f"no C++ compiler {cxx!r} on PATH (set CXX, or use envs/train.yaml, which "
            "carries one; DeepSpeed's CPU ops need C++20: gcc >= 10)"
        )
    return None


@contextlib.contextmanager
def _node_lock(folder: Path):
    """Yield True while holding the folder's kernel lock (False where the file system
    has no flock: builds then rely on torch's own lock file alone)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".spag-build.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
        except OSError as exc:
            log.warning("no flock on %s (%s): a killed build's lock is not removed", folder, exc)
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_ops(names: list[str], setting: str = "deepspeed") -> dict[str, str]:
    """Build (or load what is built) each op in the per-node folder; name -> library path.

    A missing tool or a failed build is a :class:`SpagInputError` naming ``setting``.
    """
    if not names:
        return {}
    own_folder = not os.environ.get("TORCH_EXTENSIONS_DIR")
    root = use_node_extensions_dir()
    problem = build_tools_problem()
    if problem:
        raise SpagInputError(f"{setting}: {', '.join(names)} must be compiled, but {problem}")
    from deepspeed.accelerator import get_accelerator

    built = {}
    with _node_lock(root) as locked:
        for name in names:
            builder = get_accelerator().create_op_builder(name)
            if builder is None:
                raise SpagInputError(f"{setting}: DeepSpeed has no {name} for this accelerator")
            stale = root / builder.name / "lock"
            if stale.exists() and locked and own_folder:
                # Every build in the node's own folder runs under the lock we hold: this
                # file is a dead build's. (A user's folder may be shared by other nodes.)
                log.warning("removing %s left by a killed build", stale)
                stale.unlink()
            try:
                module = builder.load(verbose=False)
            except Exception as exc:  # noqa: BLE001 - the compiler's message is the cause
                raise SpagInputError(
                    f"{setting}: building DeepSpeed's {name} in {root} failed: {exc}"
                ) from exc
            built[name] = str(getattr(module, "__file__", root / builder.name))
            log.info("DeepSpeed op %s ready: %s", name, built[name])
    return built
