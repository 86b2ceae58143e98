"""The allocator helpers of core.memory, each in a fresh process (their effect is process-wide)."""

import subprocess
import sys

import pytest

FRAGMENT_AND_TRIM = """
import re
from pathlib import Path
from pruner_model.core.memory import trim_heap

def rss_mb():
    return int(re.search(r"VmRSS:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024

blocks = [b"x" * (64 * 1024) + bytes([i % 256]) for i in range(4000)]  # 250 MB of heap blocks
kept = blocks[::10]  # every tenth stays live: the freed ones are holes the heap cannot shrink past
del blocks
before = rss_mb()
released = trim_heap()
print(released, before, rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_trim_heap_hands_freed_heap_pages_back():
    out = subprocess.run(
        [sys.executable, "-c", FRAGMENT_AND_TRIM], capture_output=True, text=True, check=True
    )
    released, before, after = out.stdout.split()
    assert released == "True"
    assert float(before) - float(after) > 150, out.stdout  # most of the 225 MB freed but resident
