"""A training process that ran a process group ends once its output is written: the exit
handlers run, the interpreter's native teardown (the backends' leftover threads) does not."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")

PROGRAM = """
import atexit, sys
import torch.distributed as dist
from spag import cli
from spag.training.distributed import end_distributed, ensure_distributed_env
if sys.argv[1] == "group":
    ensure_distributed_env()
    dist.init_process_group("gloo")
    dist.barrier()
atexit.register(lambda: print("exit handlers ran", flush=True))
cli.main = lambda: (end_distributed(), print("step done", flush=True))[0] or 0
try:
    cli.run()
finally:
    print("returned", flush=True)
"""


@pytest.mark.parametrize("world", ["group", "none"])
def test_a_process_that_ran_a_group_exits_after_its_exit_handlers(world):
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, world], capture_output=True, text=True, timeout=300
    )
    # The exit handlers run either way; only a process that ran a group leaves at once,
    # without unwinding (no ``finally``); otherwise ``run`` exits as ``sys.exit``.
    assert "step done" in proc.stdout and "exit handlers ran" in proc.stdout, proc.stderr[-2000:]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("returned" in proc.stdout) == (world == "none"), proc.stdout
