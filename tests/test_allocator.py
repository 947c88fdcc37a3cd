"""The allocator setting: freed large buffers are reused, not faulted in again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from spag.ops.allocator import user_allocator_settings

PROBE = r"""
import json, resource, sys
if sys.argv[1] == "keep":
    from spag.ops.allocator import keep_freed_memory
    assert keep_freed_memory()
n = 256 << 20
def touch():
    a = bytearray(n)
    a[0:n:4096] = b"\x01" * (n // 4096)  # one write per page
    return a
touch()  # allocated, written, freed
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
touch()
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
"""


def _second_allocation_faults(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_a_freed_buffer_is_reused_without_page_faults():
    pages = (256 << 20) // 4096
    # glibc's default: the 256 MiB buffer is a fresh mapping again, every page faults in.
    assert _second_allocation_faults("default") >= pages // 2
    assert _second_allocation_faults("keep") < pages // 100


def test_the_users_allocator_settings_win(monkeypatch):
    assert user_allocator_settings({}) is None
    assert user_allocator_settings({"MALLOC_MMAP_THRESHOLD_": "1"}) == "MALLOC_MMAP_THRESHOLD_"
    assert user_allocator_settings({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}) == (
        "GLIBC_TUNABLES"
    )
    assert user_allocator_settings({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}) == "LD_PRELOAD"
    assert user_allocator_settings({"GLIBC_TUNABLES": "glibc.rtld.nns=2"}) is None
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    from spag.ops.allocator import keep_freed_memory

    assert keep_freed_memory() is False
