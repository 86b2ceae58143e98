"""Cheap measures first: a body past the token cap is refused before anything is segmented or
tokenized whole, and token counting stops as soon as the cap is passed."""

from __future__ import annotations

import pytest
from fastapi import HTTPException
from pruner_model.serving.app import RequestChecks, ServerLimits
from pruner_model.serving.schemas import PruneBody


class _Refuses:
    """A pruner that must not be reached: segmenting or tokenizing fails the test."""

    tokenizer = None

    def selection_params(self, *a, **k):
        raise AssertionError("segmented before the cheap checks")

    def prepare(self, *a, **k):
        raise AssertionError("segmented before the cheap checks")


def test_an_over_cap_body_is_refused_before_it_is_segmented():
    checks = RequestChecks(_Refuses(), ServerLimits(max_request_tokens=1000))
    body = PruneBody(query="who?", passages=["word " * 600, "word " * 600])
    with pytest.raises(HTTPException) as err:
        checks.prune_bodies([body])
    assert err.value.status_code == 413 and "1000" in err.value.detail


def test_token_counting_stops_at_the_cap(bert_tokenizer, monkeypatch):
    import pruner_model.serving.limits as server

    counted = []
    real = server.count_tokens

    def counting(tokenizer, texts):
        counted.extend(texts)
        return real(tokenizer, texts)

    monkeypatch.setattr(server, "count_tokens", counting)

    class _Pruner:
        tokenizer = bert_tokenizer

    class _Passage:
        def __init__(self, text):
            self.text = text

    class _Request:
        prepared = [_Passage("x" * 40 + " tokens " * 30) for _ in range(50)]

    checks = RequestChecks(_Pruner(), ServerLimits(max_request_tokens=100))
    with pytest.raises(HTTPException) as err:
        checks.cost([_Request()])
    assert err.value.status_code == 413 and len(counted) < 5


@pytest.mark.parametrize(
    "extra",
    [
        {"return_documents": "yes"},
        {"top_n": "2"},
        {"return_pruned": 1},
        {"max_chunks_per_doc": True},
        {"model": "\udc80"},
    ],
)
def test_rerank_bodies_take_booleans_integers_and_text_only(extra):
    from pruner_model.serving.schemas import RerankBody
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        RerankBody(query="q", documents=["a"], **extra)
    assert RerankBody(query="q", documents=[{"text": "a"}], top_n=2, return_documents=True).top_n == 2
