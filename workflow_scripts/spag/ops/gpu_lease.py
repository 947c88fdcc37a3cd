"""Which GPUs a job uses on a machine where no scheduler assigns them.

Under SLURM a job's GPUs come in ``CUDA_VISIBLE_DEVICES``. Run locally on a machine with
several GPUs (a workstation, an 8-GPU box), Snakemake only counts ``gpus`` against
``--resources``: every job would open ``cuda:0``, two self-play shards would share it,
and a second vLLM engine asking for 0.9 of the card could not start. So a job that is
told nothing leases its GPUs here before CUDA starts: one lock file per GPU under
:func:`lease_dir`, held (``flock``) by the job's process (and by the program it execs:
``spag gpu-lease N torchrun ...``), released by the kernel when it ends, also when it
is killed. The job's ``CUDA_VISIBLE_DEVICES`` names the leased GPUs; a job that finds
too few free waits. Where ``CUDA_VISIBLE_DEVICES`` lists more GPUs than a job needs
(Snakemake run locally inside a multi-GPU allocation), the job leases among those.

Children that Python starts do not inherit the lock (``subprocess`` and
``multiprocessing`` close inherited descriptors): a child that outlives a killed job
(a vLLM engine core, a torchrun rank) keeps its GPU memory while the GPU reads as free.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
import time
from pathlib import Path

from spag.errors import SpagInputError

log = logging.getLogger(__name__)

# The files of this process's leases: open for as long as it runs.
_HELD: list[int] = []


def lease_dir() -> Path:
    """One folder per user and machine (``$SPAG_GPU_LOCKS`` where set)."""
    base = os.environ.get("SPAG_GPU_LOCKS")
    if base:
        return Path(base)
    runtime = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return Path(runtime) / f"spag-gpus-{os.getuid()}"


def lease_candidates(
    count: int, environ: dict[str, str] | None = None, total: int | None = None
) -> list[str] | None:
    """The GPUs (``CUDA_VISIBLE_DEVICES`` entries) among which a job of ``count`` GPUs
    leases, or None where its GPUs are chosen already: a rank that torchrun started (its
    launcher leased them), ``CUDA_VISIBLE_DEVICES`` listing no more than ``count`` (a
    SLURM job's own GPUs), or no GPU at all (``total``: the machine's, from NVML)."""
    env = os.environ if environ is None else environ
    if count < 1 or "LOCAL_RANK" in env:
        return None
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(i) for i in range(total)] if total else None
    gpus = [v.strip() for v in visible.split(",") if v.strip()]
    if not gpus or gpus[0].startswith("-") or len(gpus) <= count:
        return None
    return gpus


def lease_gpus(
    count: int, step: str, gpus: list[str], folder: Path | None = None, poll: float = 1.0
) -> list[str]:
    """Lease ``count`` of ``gpus``, waiting while fewer are free; set
    ``CUDA_VISIBLE_DEVICES`` to them and return them."""
    if count > len(gpus):
        raise SpagInputError(
            f"{step}: this job asks for {count} GPU(s) (resources.<family>.gpus) but this "
            f"machine has {len(gpus)}: lower the family's gpus, or run on a larger machine"
        )
    if folder is None:
        folder = lease_dir()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    waited = 0.0
    while True:
        got: list[tuple[str, int]] = []
        for gpu in gpus:
            # Read-only is enough for flock, so a folder shared by users works too.
            fd = os.open(folder / f"gpu-{gpu}.lock", os.O_RDONLY | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            got.append((gpu, fd))
            if len(got) == count:
                break
        if len(got) == count:
            break
        for _, fd in got:  # all or none: two waiting jobs never hold half each
            os.close(fd)
        if waited % 60 == 0:
            log.info("%s: waiting for %d free GPU(s) of %d (%s)", step, count, len(gpus), folder)
        time.sleep(poll)
        waited += poll
    for _, fd in got:
        os.set_inheritable(fd, True)  # kept by a program this process execs (torchrun)
        _HELD.append(fd)
    leased = [gpu for gpu, _ in got]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(leased)
    log.info("%s: GPU(s) %s leased", step, os.environ["CUDA_VISIBLE_DEVICES"])
    return leased


def claim_local_gpus(count: int, step: str, total: int | None) -> list[str] | None:
    """Lease ``count`` of the machine's ``total`` GPUs (NVML's count) where
    :func:`lease_candidates` says so; None where nothing was leased. Must run before
    CUDA starts (it would not see the change)."""
    gpus = lease_candidates(count, total=total)
    if gpus is None:
        return None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        log.warning("%s: CUDA started before the GPU lease; using the GPUs it sees", step)
        return None
    return lease_gpus(count, step, gpus)
