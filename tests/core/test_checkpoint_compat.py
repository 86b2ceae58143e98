"""A checkpoint saved by the code before the package tree was rearranged (commit 84f59cd, when
the core lived in pruner_model/) loads and prunes identically.

The fixture holds that code's own ``config.json`` and what its ``ContextPruner`` returned; the
weights are rebuilt here from the same seed, and their digest must equal the one that code saved
(so the rebuilt folder is the one it wrote)."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from pruner_model import ContextPruner, PrunerConfig, PrunerModel

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "old_layout"


def weights_digest(state_dict) -> str:
    h = hashlib.sha256()
    for k in sorted(state_dict):
        h.update(k.encode())
        h.update(state_dict[k].float().numpy().tobytes())
    return h.hexdigest()


def test_checkpoint_of_the_old_layout_loads_and_prunes_identically(tmp_path, bert_tokenizer):
    expected = json.loads((FIXTURE / "prune_output.json").read_text())
    folder = tmp_path / "old"
    folder.mkdir()
    shutil.copy(FIXTURE / "config.json", folder / "config.json")
    torch.manual_seed(0)
    model = PrunerModel(PrunerConfig.from_pretrained(str(folder))).eval()
    assert weights_digest(model.state_dict()) == expected["weights_sha256"]
    model.save_pretrained(folder)
    bert_tokenizer.save_pretrained(folder)
    assert json.loads((FIXTURE / "config.json").read_text())["model_type"] == "pruner"
    r = ContextPruner.from_pretrained(folder).prune(expected["query"], expected["passages"])
    assert r.text == expected["text"]
    assert [[s.kept for s in p.sentences] for p in r.passages] == expected["kept"]
    for got, want in zip(r.passages, expected["scores"]):
        assert [s.score for s in got.sentences] == pytest.approx(want, abs=1e-6)
    assert [p.relevance for p in r.passages] == pytest.approx(expected["relevance"], abs=1e-6)
    assert (r.stats.tokens_in, r.stats.tokens_out) == (expected["tokens_in"], expected["tokens_out"])
