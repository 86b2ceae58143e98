"""The notebooks run end to end (fast mode), so they cannot rot. Outputs are not written back."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["quickstart.ipynb", "evaluate_your_data.ipynb"])
def test_notebook_executes(name, monkeypatch):
    monkeypatch.setenv("PRUNER_NB_FAST", "1")
    monkeypatch.setenv("PRUNER_MODEL", str(ROOT / "runs" / "__none__"))  # never depend on local runs
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(
        nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"
    ]
    assert not errors
    assert os.environ["PRUNER_NB_FAST"] == "1"
