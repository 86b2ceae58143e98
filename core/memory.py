"""Resident memory of long CPU runs with varied tensor shapes.

glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), so the
activations of later batches come from the heap; with batch shapes that change every step (length
-grouped windows) the heap fragments and resident memory climbs for the whole run. A fixed
threshold keeps large blocks on mmap, returned to the system when freed, at the price of page
faults on every large allocation: lower, flat memory for slower steps (measured in
docs/scale-out.md with ``benchmarks/bench_train_memory.py``). Training leaves it off unless
``train.malloc_mmap_threshold`` is set, and ``pruner serve`` unless ``--malloc-mmap-threshold``
is (requests of every length fragment a server's heap the same way; docs/serving.md measures both).
"""

from __future__ import annotations

import ctypes
import sys

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def fix_mmap_threshold(nbytes: int) -> bool:
    """Fix glibc's mmap threshold at ``nbytes`` (0: leave the allocator as it is). Returns whether
    it was set (False off Linux/glibc, e.g. macOS or musl)."""
    if nbytes <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, int(nbytes)))
    except (OSError, AttributeError):
        return False
