"""Small helpers on checkpoint folders that need no torch."""

from __future__ import annotations

import json
from pathlib import Path


def read_threshold(path: str | Path) -> float:
    """The default threshold stored in a checkpoint or export folder's config.json."""
    return float(json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))["threshold"])
