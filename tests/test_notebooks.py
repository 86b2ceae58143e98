"""The notebooks run end to end (fast mode), so they cannot rot. Outputs are not written back."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def _corpus_or_skip(monkeypatch) -> None:
    """The quickstart notebook builds the corpus from the public QA files when data/ lacks it:
    from $PRUNER_QA_DATA, else the pack beside the repository (developer machines and CI); skipped
    where neither is there."""
    if (ROOT / "data" / "qa" / "train.jsonl").is_file():
        return
    pack = os.environ.get("PRUNER_QA_DATA") or str(ROOT.parent / "shared" / "data" / "qa")
    if not Path(pack, "MANIFEST.tsv").is_file():
        pytest.skip(f"the corpus cannot be built here: no public QA files at {pack} (set PRUNER_QA_DATA)")
    monkeypatch.setenv("PRUNER_QA_DATA", pack)


@pytest.mark.parametrize("name", ["quickstart.ipynb", "evaluate_your_data.ipynb"])
def test_notebook_executes(name, monkeypatch):
    if name == "quickstart.ipynb":  # it trains on the public QA files; the other brings its own records
        _corpus_or_skip(monkeypatch)
    monkeypatch.setenv("PRUNER_NB_FAST", "1")
    monkeypatch.delenv("PRUNER_MODEL", raising=False)  # the shipped default, never a local run
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(
        nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"
    ]
    assert not errors
    assert os.environ["PRUNER_NB_FAST"] == "1"
