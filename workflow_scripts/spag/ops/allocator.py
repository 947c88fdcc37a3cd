"""Keep freed memory in the process (glibc malloc), so that training steps stop paying page faults.

glibc serves an allocation above its mmap threshold (128 KiB at first, at most
32 MiB as it adapts) with a fresh ``mmap`` and gives it back on ``free``. A CPU
training step allocates and frees hundreds of such buffers (activations, their
gradients, logits), so every step faults every page of them in again: on the
project's 2-core machine, a SmolLM2-135M training pass spent 1.0-1.3 s of kernel
time (of 6.3-6.5 s) in ~230,000 minor page faults. With the thresholds raised, freed
buffers go back to malloc's heap and the next step reuses them: the faults and their
kernel time are gone, and a whole training run is 1.15x faster
(``perf/results/training_analysis.md``).

The memory a step frees stays with the process (its peak is unchanged). A user who
sets glibc's own malloc settings (``MALLOC_*_`` variables, ``GLIBC_TUNABLES``) or
preloads another allocator keeps them: nothing is changed then.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

# mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Below this size an allocation comes from the heap; freed heap memory at its top is
# returned to the system only beyond this much.
KEEP_BYTES = 1 << 30

_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def user_allocator_settings(environ: dict[str, str] | None = None) -> str | None:
    """The environment variable by which the user chose the allocator's behaviour, if any."""
    env = os.environ if environ is None else environ
    for name in _USER_SETTINGS:
        if name in env:
            return name
    if "glibc.malloc" in env.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES"
    if "malloc" in env.get("LD_PRELOAD", ""):  # jemalloc, tcmalloc, mimalloc
        return "LD_PRELOAD"
    return None


def keep_freed_memory(keep_bytes: int = KEEP_BYTES) -> bool:
    """Raise glibc's mmap and trim thresholds to ``keep_bytes``; return whether it was done.

    Nothing is done off Linux/glibc or where the user configured the allocator.
    """
    if not sys.platform.startswith("linux") or user_allocator_settings() is not None:
        return False
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, keep_bytes)) and bool(
        mallopt(M_TRIM_THRESHOLD, keep_bytes)
    )
    log.debug("malloc keeps freed memory below %d bytes: %s", keep_bytes, done)
    return done
