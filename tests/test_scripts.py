"""Every script under ``experiments/`` and ``benchmarks/`` imports on this machine and answers
``--help`` (each runs on data a developer machine has: ``pruner data qa``'s files, or its own)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*ROOT.glob("experiments/*.py"), *ROOT.glob("benchmarks/*.py")])


def test_there_are_scripts():
    assert len(SCRIPTS) > 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_script_answers_help(script):
    doc = script.read_text(encoding="utf-8").lstrip()
    assert doc.startswith('"""'), f"{script.name}: no docstring saying what it measures"
    out = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage:" in out.stdout
