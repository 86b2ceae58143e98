"""The ``language`` setting through prune(), the HTTP body and the CLI; every script is cut."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from pruner_model.inference import ContextPruner
from pruner_model.serving.app import create_app

from pruner_model.cli import main

ZH = "北京是中国的首都。上海很大！你去过吗？"
HI = "दिल्ली भारत की राजधानी है। यह बड़ा शहर है।"


@pytest.fixture(scope="module")
def pruner(checkpoint):
    return ContextPruner.from_pretrained(checkpoint)


def test_prune_cuts_every_script_and_takes_a_language(pruner):
    r = pruner.prune("首都是哪里？", [ZH, HI], threshold=0.0)
    assert [len(p.sentences) for p in r.passages] == [3, 2]
    assert (
        pruner.prune("q", ["Das ist z.B. gut. Ja."], language="de", threshold=0.0)
        .passages[0]
        .sentences[0]
        .end
        == 17
    )
    with pytest.raises(ValueError, match="no punkt parameters for language 'klingon'"):
        pruner.prune("q", ["x"], language="klingon")


def test_http_and_cli_take_the_language(pruner, checkpoint, tmp_path):
    with TestClient(create_app(pruner)) as client:
        ok = client.post(
            "/v1/prune", json={"query": "q", "passages": [ZH], "language": "auto", "threshold": 0.0}
        )
        assert ok.status_code == 200 and len(ok.json()["passages"][0]["sentences"]) == 3
        bad = client.post("/v1/prune", json={"query": "q", "passages": [ZH], "language": "klingon"})
        assert bad.status_code == 422 and "klingon" in bad.json()["detail"]
    passages = tmp_path / "p.json"
    passages.write_text(json.dumps([ZH]), encoding="utf-8")
    out = tmp_path / "r.json"
    args = ["prune", "--model", str(checkpoint), "--query", "q", "--passages", str(passages)]
    assert main([*args, "--language", "english", "--format", "json", "--output", str(out)]) == 0
    assert len(json.loads(out.read_text())["passages"][0]["sentences"]) == 3
