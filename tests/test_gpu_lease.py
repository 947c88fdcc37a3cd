"""Local jobs lease distinct GPUs (spag.ops.gpu_lease): never two on one GPU that the
config gives to one, a job waits while too few are free, and a job that asks for more
GPUs than the machine has is refused."""

from __future__ import annotations

import select
import subprocess
import sys
from pathlib import Path

import pytest

from spag.errors import SpagInputError
from spag.ops.device import nvml_device_count
from spag.ops.gpu_lease import lease_candidates, lease_gpus

HOLD = """
import os, sys, time
from pathlib import Path
from spag.ops.gpu_lease import lease_gpus
lease_gpus(int(sys.argv[1]), "spag play", ["0", "1", "2"], Path(sys.argv[2]), poll=0.05)
print(os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
time.sleep(60)
"""


def _start(count: int, folder: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(count), str(folder)], stdout=subprocess.PIPE, text=True
    )


def _line(proc: subprocess.Popen, seconds: float) -> str | None:
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    return proc.stdout.readline().strip() if ready else None


def test_jobs_lease_distinct_gpus_and_wait_for_a_free_one(tmp_path):
    procs = []
    try:
        procs.append(_start(1, tmp_path))
        assert _line(procs[0], 30) == "0"
        procs.append(_start(2, tmp_path))
        assert _line(procs[1], 30) == "1,2"
        # All three GPUs are held: the next job waits, holding none.
        procs.append(_start(1, tmp_path))
        assert _line(procs[2], 1.5) is None
        procs[0].kill()  # a killed job's GPU is free again (the kernel drops its lock)
        assert _line(procs[2], 30) == "0"
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_more_gpus_than_the_machine_has_is_refused(tmp_path):
    with pytest.raises(SpagInputError, match=r"asks for 4 GPU\(s\).*this machine has 2"):
        lease_gpus(4, "spag train", ["0", "1"], tmp_path)


def test_a_job_leases_among_the_gpus_nobody_chose_for_it():
    assert lease_candidates(1, {}, total=2) == ["0", "1"]
    assert lease_candidates(1, {}, total=0) is None  # no GPU here
    assert lease_candidates(0, {}, total=2) is None  # a CPU job
    # torchrun's ranks: their launcher leased the GPUs
    assert lease_candidates(1, {"LOCAL_RANK": "1"}, total=2) is None
    # a SLURM job's own GPUs, or the user's choice: no more than the job needs
    assert lease_candidates(1, {"CUDA_VISIBLE_DEVICES": "3"}, total=8) is None
    assert lease_candidates(2, {"CUDA_VISIBLE_DEVICES": "2,5"}, total=8) is None
    assert lease_candidates(1, {"CUDA_VISIBLE_DEVICES": ""}, total=8) is None
    assert lease_candidates(1, {"CUDA_VISIBLE_DEVICES": "-1"}, total=8) is None
    # Snakemake run locally inside a 4-GPU allocation: each job leases among those 4
    assert lease_candidates(1, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}) == ["4", "5", "6", "7"]


@pytest.mark.skipif(bool(nvml_device_count()), reason="this machine has GPUs")
def test_gpu_lease_runs_its_command_where_no_gpu_is_there(tmp_path):
    # This machine has no NVML: the command runs as it is, nothing leased.
    done = subprocess.run(
        [sys.executable, "-m", "spag", "gpu-lease", "2", sys.executable, "-c",
         "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES'))"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "None"
