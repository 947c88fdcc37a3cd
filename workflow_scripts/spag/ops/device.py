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

import contextlib
import ctypes
import os
from collections.abc import Iterator
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


# The oldest NVIDIA driver series for each CUDA major a torch build can be made for
# (NVIDIA's CUDA toolkit release notes, "CUDA Toolkit and Minimum Required Driver
# Version": minor-version compatibility holds within a major from these drivers on).
DRIVER_MINIMUM = {11: "R450", 12: "R525", 13: "R580"}
# The setting that picks the CUDA major of the GPU environments (envs/, envs/cuda12/).
BUILD_SETTING = "cuda_build"


def _major(version: str) -> int:
    return int(version.split(".")[0])


def driver_minimum(built: str) -> str:
    """The driver series a torch built for CUDA ``built`` needs, e.g. ``R580 or newer``."""
    series = DRIVER_MINIMUM.get(_major(built))
    return f"{series} or newer" if series else f"one supporting CUDA {built}"


@contextlib.contextmanager
def _nvml() -> Iterator[tuple[Any, int] | None]:
    """NVML initialised with the node's GPU count, or None where it cannot be loaded
    or counted; shut down on leaving. No CUDA context, no ``cuInit``."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        yield None
        return
    if lib.nvmlInit_v2() != 0:
        yield None
        return
    try:
        count = ctypes.c_uint(0)
        ok = lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
        yield (lib, int(count.value)) if ok else None
    finally:
        lib.nvmlShutdown()


def nvml_device_count() -> int | None:
    """GPUs this process may use, from NVML, or None where NVML cannot be loaded.
    ``CUDA_VISIBLE_DEVICES`` narrows the count as CUDA would (an empty value or ``-1``
    hides every GPU)."""
    with _nvml() as found:
        if found is None:
            return None
        total = found[1]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return total
    listed = [v for v in visible.split(",") if v.strip()]
    if not listed or listed[0].strip().startswith("-"):
        return 0
    return min(len(listed), total)


class _NvmlMemory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


def nvml_devices() -> list[dict[str, Any]]:
    """Name and total memory of the GPUs NVML lists (all of the node's; empty without
    NVML), for a process that leaves the GPU to a vLLM engine."""
    out: list[dict[str, Any]] = []
    with _nvml() as found:
        if found is None:
            return out
        lib, count = found
        for i in range(count):
            handle = ctypes.c_void_p()
            memory = _NvmlMemory()
            name = ctypes.create_string_buffer(96)
            if (
                lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) == 0
                and lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0
                and lib.nvmlDeviceGetName(handle, name, 96) == 0
            ):
                gib = round(memory.total / 1024**3, 1)
                out.append({"index": i, "name": name.value.decode(), "memory_gib": gib})
    return out


def cuda_problem(probe: bool = True) -> str | None:
    """Why CUDA cannot be used in this process (None when it works).

    The driver's CUDA is compared with torch's build first (PyPI's torch is built for
    one CUDA major; under an older driver ``torch.cuda.is_available()`` is False with
    only a warning, or True under NVML-based checks). With ``probe`` a real allocation
    and product on this rank's GPU (``LOCAL_RANK``; no context on another rank's GPU);
    without, nothing that initialises CUDA (no ``cuInit``): the GPUs are counted by
    NVML, for a process that hands the GPU to vLLM's engine, which forks.
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
    if driver is None:
        return f"no NVIDIA driver on this node: {versions}"
    if _major(driver) < _major(built):
        return (
            f"the driver is too old for this torch: {versions}. CUDA {built} builds need "
            f"an NVIDIA driver of the {driver_minimum(built)} series; set {BUILD_SETTING}: "
            f"cu{_major(driver)} for builds made for the driver's CUDA, if the project "
            "ships them (docs/cluster.md)"
        )
    if not probe:
        # torch's own is_available() would run cuInit here (cudaGetDeviceCount), after
        # which a forked engine process cannot use CUDA. NVML counts without it; the
        # variable also makes torch's later checks in this process NVML-based.
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        count = nvml_device_count()
        if count is None:
            return f"NVML (libnvidia-ml.so.1) cannot list this node's GPUs: {versions}"
        if count == 0:
            return f"no GPU is visible to this job: {versions}"
        return None
    try:
        if not torch.cuda.is_available():
            return f"torch finds no usable GPU: {versions}"
        # A real allocation and product: a device that is listed can still fail here.
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local if local < torch.cuda.device_count() else 0)
        a = torch.ones((64, 64), device=device)
        (a @ a).sum().item()
    except Exception as exc:  # noqa: BLE001 - any CUDA failure is reported, not raised
        return f"CUDA does not work ({type(exc).__name__}: {exc}): {versions}"
    return None


def use_unplanned_attention() -> None:
    """Leave cuDNN's attention out of torch's SDPA kernels in this process.

    In bf16 on Hopper torch picks cuDNN's attention, which builds a plan for every new
    shape: 67 ms a call on an H200 against 0.05 ms for the flash kernel. Packed samples
    and generation's sub-batches bring new shapes at nearly every call; without cuDNN,
    bf16 reference scoring ran 21x faster packed and 4x faster padded
    (perf/results/gpu/2026-11-27-h200-run2).
    """
    import torch

    torch.backends.cuda.enable_cudnn_sdp(False)


def select_device(requested: str | None, step: str, probe: bool = True, gpus: int = 1) -> str:
    """``cuda`` or ``cpu`` for ``requested`` (``auto``, ``cuda``, ``cpu``; None: auto).

    ``cuda`` without working CUDA is a :class:`SpagInputError` naming the versions and
    the setting to change. ``probe``: see :func:`cuda_problem`. A process that gets
    ``cuda`` runs attention without cuDNN's (:func:`use_unplanned_attention`). Before
    CUDA starts, a job whose GPUs nobody chose leases ``gpus`` of the machine's
    (:func:`spag.ops.gpu_lease.claim_local_gpus`).
    """
    requested = requested or "auto"
    if requested not in DEVICES:
        raise SpagInputError(f"--device must be one of {', '.join(DEVICES)}, got {requested!r}")
    if requested == "cpu":
        return "cpu"
    from spag.ops.gpu_lease import claim_local_gpus

    if cuda_problem(probe=False) is None:  # NVML only: CUDA not started yet
        claim_local_gpus(gpus, step, nvml_device_count())
    problem = cuda_problem(probe)
    if problem is None:
        use_unplanned_attention()
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
