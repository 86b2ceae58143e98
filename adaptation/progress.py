"""The adaptation's progress lines on stderr, one a step."""

from __future__ import annotations

import sys


def say(step: str, text: str) -> None:
    """One line of the adaptation's progress on stderr."""
    print(f"[adapt] {step}: {text}", file=sys.stderr, flush=True)
