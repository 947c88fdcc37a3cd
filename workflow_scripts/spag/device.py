"""The device a step runs on, chosen by the job, never guessed.

A job whose rule family asks for GPUs (``resources.<family>.gpus`` > 0) passes
``--device cuda``: without working CUDA it stops at once, with torch's CUDA version and
the driver's in the message, instead of running a 7B model on the CPU until its time
limit (PyPI's torch is built for one CUDA major; under an older driver
``torch.cuda.is_available()`` is False with only a warning). A family without GPUs
passes ``--device cpu`` and stays on the CPU. ``auto`` (a step run by hand) is CUDA when
it works, else the CPU.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from spag.errors import SpagInputError

DEVICES = ("auto", "cuda", "cpu")


def family_device(config: dict[str, Any], family: str) -> str:
    """The ``--device`` of a rule family's jobs: ``cuda`` where it asks for GPUs, else ``cpu``."""
    return "cuda" if config["resources"][family].get("gpus", 0) > 0 else "cpu"


def _cuda_version_text(version: int) -> str:
    # CUDA encodes 12.4 as 12040.
    return f"{version // 1000}.{(version % 1000) // 10}"


def driver_cuda_version() -> str | None:
    """The highest CUDA version the installed NVIDIA driver supports, or None without one.

    Read from the driver library itself (``cuDriverGetVersion``), so it works where
    torch's CUDA build does not match the driver.
    """
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
            return _cuda_version_text(version.value)
    return None


def cuda_problem(probe: bool = True) -> str | None:
    """Why CUDA cannot be used in this process (None when it works).

    With ``probe`` a real allocation and product on this rank's GPU (``LOCAL_RANK``; no
    context on another rank's GPU); without, only what needs no CUDA context (for a
    process that hands the GPU to vLLM's workers).
    """
    import torch

    built = torch.version.cuda
    driver = driver_cuda_version()
    versions = (
        f"torch {torch.__version__} is built for CUDA {built or 'none (a CPU build)'}, "
        f"the node's driver supports CUDA {driver or 'none (no NVIDIA driver found)'}; "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}"
    )
    if built is None:
        return f"no CUDA in this torch: {versions}"
    try:
        if not torch.cuda.is_available():
            return f"torch finds no usable GPU: {versions}"
        if probe:
            # A real allocation and product: a device that is listed can still fail here.
            local = int(os.environ.get("LOCAL_RANK", "0"))
            device = torch.device("cuda", local if local < torch.cuda.device_count() else 0)
            a = torch.ones((64, 64), device=device)
            (a @ a).sum().item()
    except Exception as exc:  # noqa: BLE001 - any CUDA failure is reported, not raised
        return f"CUDA does not work ({type(exc).__name__}: {exc}): {versions}"
    return None


def select_device(requested: str | None, step: str, probe: bool = True) -> str:
    """``cuda`` or ``cpu`` for ``requested`` (``auto``, ``cuda``, ``cpu``; None: auto).

    ``cuda`` without working CUDA is a :class:`SpagInputError` naming the versions and
    the setting to change. ``probe``: see :func:`cuda_problem`.
    """
    requested = requested or "auto"
    if requested not in DEVICES:
        raise SpagInputError(f"--device must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested == "cpu":
        return "cpu"
    problem = cuda_problem(probe)
    if problem is None:
        return "cuda"
    if requested == "auto":
        return "cpu"
    raise SpagInputError(
        f"{step}: this job's rule family asks for GPUs (resources.<family>.gpus > 0) but "
        f"{problem}. Install a torch built for the driver's CUDA (or update the driver), "
        "or set the family's gpus to 0 to run it on the CPU"
    )


def cuda_devices() -> list[dict[str, Any]]:
    """Name and memory of every GPU this process sees; call it once :func:`cuda_problem`
    found none (it does not probe again)."""
    import torch

    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append({"index": i, "name": p.name, "memory_gib": round(p.total_memory / 1024**3, 1)})
    return out
