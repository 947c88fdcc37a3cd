"""Which GPUs a job uses on a machine where no scheduler assigns them.

Under SLURM a job's GPUs come in ``CUDA_VISIBLE_DEVICES``. Run locally on a machine with
several GPUs (a workstation, an 8-GPU box), Snakemake only counts ``gpus`` against
``--resources``: every job would open ``cuda:0``, two self-play shards would share it,
and a second vLLM engine asking for 0.9 of the card could not start. So a job that is
told nothing leases its GPUs here before CUDA starts: one lock file per GPU under
:func:`lease_dir`, held (``flock``) for the life of the process and of the children it
starts, and released by the kernel when they end, also when they are killed. The job's
``CUDA_VISIBLE_DEVICES`` names the leased GPUs; a job that finds too few free waits.
"""

from __future__ import annotations

import fcntl
import logging
import os
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


def needs_lease(environ: dict[str, str] | None = None) -> bool:
    """Whether nobody chose this process's GPUs: no ``CUDA_VISIBLE_DEVICES``, not a
    SLURM job's step, not a rank that torchrun started (its launcher leased them)."""
    env = os.environ if environ is None else environ
    chosen = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "LOCAL_RANK")
    return not any(key in env for key in chosen)


def lease_gpus(
    count: int, step: str, total: int, folder: Path | None = None, poll: float = 1.0
) -> list[int]:
    """Lease ``count`` of the machine's ``total`` GPUs, waiting while fewer are free; set
    ``CUDA_VISIBLE_DEVICES`` to them and return their indices."""
    if count > total:
        raise SpagInputError(
            f"{step}: this job asks for {count} GPU(s) (resources.<family>.gpus) but this "
            f"machine has {total}: lower the family's gpus, or run on a larger machine"
        )
    folder = folder or lease_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    waited = 0.0
    while True:
        got: list[tuple[int, int]] = []
        for index in range(total):
            fd = os.open(folder / f"gpu{index}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            got.append((index, fd))
            if len(got) == count:
                break
        if len(got) == count:
            break
        for _, fd in got:  # all or none: two waiting jobs never hold half each
            os.close(fd)
        if waited % 60 == 0:
            log.info("%s: waiting for %d free GPU(s) of %d (%s)", step, count, total, folder)
        time.sleep(poll)
        waited += poll
    for _, fd in got:
        os.set_inheritable(fd, True)  # children (vLLM's workers, torchrun's ranks) hold it too
        _HELD.append(fd)
    indices = [index for index, _ in got]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, indices))
    log.info("%s: GPU(s) %s leased", step, os.environ["CUDA_VISIBLE_DEVICES"])
    return indices


def claim_local_gpus(count: int, step: str) -> list[int] | None:
    """Lease ``count`` GPUs where nobody chose this process's GPUs and the machine has
    any (:func:`needs_lease`); None where nothing was leased."""
    from spag.ops.device import nvml_device_count

    if count < 1 or not needs_lease():
        return None
    total = nvml_device_count()
    if not total:
        return None
    return lease_gpus(count, step, total)
