"""Resident memory of long CPU runs with varied tensor shapes.

glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), so the
activations of later batches come from the heap; with batch shapes that change every step (length
-grouped windows) the heap fragments and resident memory climbs for the whole run. A fixed
threshold keeps large blocks on mmap, returned to the system when freed, at the price of page
faults on every large allocation: lower memory for slower steps (measured in docs/scale-out.md
with ``benchmarks/bench_train_memory.py`` and in a real fine-tuning run). Training fixes it at
16 MiB (``train.malloc_mmap_threshold``: the largest activations mapped, the rest on the heap) and hands
the heap's free pages back every ``train.malloc_trim_every`` steps and between the steps of a long
run (:func:`trim_heap`); ``pruner serve`` leaves the allocator alone unless
``--malloc-mmap-threshold`` is given (requests of every length fragment a server's heap the same
way; docs/serving.md measures both).
"""

from __future__ import annotations

import ctypes
import sys

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
TRAINING_MMAP_THRESHOLD = 16 * 1024 * 1024  # train.malloc_mmap_threshold's default, and pruner adapt's


def _glibc(name: str, *args: int) -> bool:
    """glibc's allocator call ``name(*args)``, its result as a bool; False off Linux/glibc (macOS,
    musl)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(getattr(ctypes.CDLL("libc.so.6"), name)(*args))
    except (OSError, AttributeError):
        return False


def fix_mmap_threshold(nbytes: int) -> bool:
    """Fix glibc's mmap threshold at ``nbytes`` (0: leave the allocator as it is). Returns whether
    it was set (False off Linux/glibc, e.g. macOS or musl)."""
    return nbytes > 0 and _glibc("mallopt", M_MMAP_THRESHOLD, int(nbytes))


def trim_heap() -> bool:
    """Hand the heap's free pages back to the system (glibc ``malloc_trim``), e.g. between the
    steps of a long run: a step that follows training then starts from what is live, not from the
    training's fragmented heap. Returns whether glibc released anything (False elsewhere)."""
    if not sys.platform.startswith("linux"):  # nothing to hand back: spare the collection too
        return False
    import gc

    gc.collect()
    return _glibc("malloc_trim", 0)
