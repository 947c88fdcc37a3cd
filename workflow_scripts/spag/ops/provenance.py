"""What produced a result: each job's host, GPUs and library versions, and the run's.

Every ``spag`` step that finishes writes a job record beside its output
(``<output>.job.json``, for a file or a folder: a folder's contents stay its
own); ``spag
run-info`` gathers them with the project's commit and the resolved config into
``results/run_info.json``. Nothing here imports torch or talks to a GPU: versions
come from the installed packages' metadata, GPU names from the NVIDIA driver's
``/proc`` entries.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from spag import __version__

# The resolved config, as the workflow hands it to `spag run-info` (too long for a
# command line that the plan prints).
ENV_CONFIG = "SPAG_RESOLVED_CONFIG"
JOB_RECORD_SUFFIX = ".job.json"
# Distributions whose versions decide a result (None where not installed).
PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "accelerate",
    "deepspeed",
    "vllm",
    "lm-eval",
    "snakemake",
    "httpx",
)
# Flags whose value is the step's output (the first one present names the record).
OUTPUT_FLAGS = ("output", "output_dir", "output_train")
# Checks, not results: their reports are temporary and carry the host facts already.
UNRECORDED_STEPS = ("preflight", "preflight-report")


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def gpu_names() -> list[str]:
    """The node's NVIDIA GPUs as the driver lists them (empty without a driver)."""
    names = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            for line in info.read_text().splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
        except OSError:
            continue
    return names


def host_info() -> dict[str, Any]:
    from spag.ops.device import driver_cuda_version

    torch = sys.modules.get("torch")  # only if the step imported it
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "spag": __version__,
        "packages": package_versions(),
        "torch_cuda": getattr(getattr(torch, "version", None), "cuda", None),
        "driver_cuda": driver_cuda_version(),
        "gpus": gpu_names(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }


def git_info(path: str | os.PathLike) -> dict[str, Any] | None:
    """The checkout's commit and whether it has uncommitted changes (None outside git)."""

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(
                ["git", "-C", str(path), *args], capture_output=True, text=True, timeout=20
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status)}


def job_record_path(output: str | os.PathLike) -> Path:
    out = Path(output)
    return out.with_name(out.name + JOB_RECORD_SUFFIX)


def write_job_record(step: str, output: str | os.PathLike, started: float) -> Path | None:
    """Record the finished step beside its output (rank 0 only); None if it has none."""
    if os.environ.get("RANK", "0") != "0" or not Path(output).exists():
        return None
    record = {
        "step": step,
        "output": str(output),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "seconds": round(time.time() - started, 3),
        **host_info(),
    }
    path = job_record_path(output)
    from spag.data.tables import atomic_path

    with atomic_path(path, suffix=".json.tmp") as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n")
    return path


def read_job_records(outputs: list[str | os.PathLike]) -> list[dict[str, Any]]:
    """The job records of these outputs (outputs without one are skipped)."""
    records = []
    for output in outputs:
        path = job_record_path(output)
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return records
