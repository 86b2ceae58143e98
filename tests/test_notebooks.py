"""The notebooks run end to end (fast mode), so they cannot rot. Outputs are not written back."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def _corpus_or_skip() -> None:
    """The quickstart notebook builds the embedded corpus when data/ lacks it; where the bigbench
    sdist cannot be had (no index serves it and no copy is named), it cannot run: skipped, with
    pip's reason."""
    from pruner_model.annotation.bigbench import SdistError, locate_sdist

    if all((ROOT / "data" / d / "train.jsonl").is_file() for d in ("squad", "mix")):
        return
    try:
        locate_sdist()
    except SdistError as exc:
        pytest.skip(f"the embedded corpus cannot be built here: {exc}")


@pytest.mark.parametrize("name", ["quickstart.ipynb", "evaluate_your_data.ipynb"])
def test_notebook_executes(name, monkeypatch):
    if name == "quickstart.ipynb":  # it trains on the embedded corpus; the other brings its own records
        _corpus_or_skip()
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
