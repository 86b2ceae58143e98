"""`pruner serve` as a drop-in rerank endpoint: the bodies Cohere (v1, v2), Jina and
text-embeddings-inference clients send, the official Cohere SDK against a live server, TEI's
/info, a readiness /health, CORS for browsers, and one error shape."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient
from pruner_model.inference import ContextPruner
from pruner_model.serving.app import create_app

from tests.serving.test_reliability import Served

pytestmark = pytest.mark.slow
QUERY = "When was the tower built?"
DOCS = ["Bananas are yellow.", "The tower was built in 1889. It is made of iron.", "Paris is in France."]


@pytest.fixture(scope="module")
def pruner(checkpoint):
    return ContextPruner.from_pretrained(checkpoint)


@pytest.fixture(scope="module")
def client(pruner):
    app = create_app(pruner, cors_origins=("https://app.example",))
    with TestClient(app) as c:
        yield c


def expected_order(pruner) -> list[int]:
    return [r.index for r in pruner.rank(QUERY, DOCS)]


@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank"])
def test_cohere_and_jina_bodies_rank_like_the_python_api(client, pruner, path):
    body = {
        "model": "rerank-english-v3.0",
        "query": QUERY,
        "documents": [{"text": d, "id": str(i)} for i, d in enumerate(DOCS)],  # Cohere v1 objects
        "top_n": 2,
        "return_documents": True,
        "max_chunks_per_doc": 10,
    }
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert [x["index"] for x in got["results"]] == expected_order(pruner)[:2]
    assert got["results"][0]["document"]["text"] == DOCS[got["results"][0]["index"]]
    scores = [x["relevance_score"] for x in got["results"]]
    assert scores == sorted(scores, reverse=True) and got["id"] and got["meta"]["billed_units"]
    plain = client.post(path, json={"model": "m", "query": QUERY, "documents": DOCS}).json()  # Jina / v2
    assert [x["index"] for x in plain["results"]] == expected_order(pruner)


def test_tei_rerank_and_info(client, pruner):
    r = client.post("/rerank", json={"query": QUERY, "texts": DOCS, "return_text": True})
    assert r.status_code == 200, r.text
    got = r.json()
    assert [x["index"] for x in got] == expected_order(pruner) and got[0]["text"] == DOCS[got[0]["index"]]
    raw = client.post("/rerank", json={"query": QUERY, "texts": DOCS, "raw_scores": True}).json()
    assert [x["index"] for x in raw] == [x["index"] for x in got]
    for r, p in zip(raw, got):  # the logit of the probability
        assert r["score"] == pytest.approx(math.log(p["score"] / (1 - p["score"])), abs=1e-4)
    info = client.get("/info").json()
    assert info["max_input_length"] == pruner.config.max_length and "reranker" in info["model_type"]


def test_one_error_shape_cors_and_refusals_are_not_errors(client):
    r = client.post("/v2/rerank", json={"query": QUERY, "documents": DOCS, "top_n": 0})
    assert r.status_code == 422 and isinstance(r.json()["detail"], str) and "top_n" in r.json()["detail"]
    r = client.post("/v1/prune", json={"query": "q", "passages": ["x"] * 100})  # over the passage limit
    assert r.status_code == 422 and isinstance(r.json()["detail"], str)
    pre = client.options(
        "/v2/rerank",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
    )
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://app.example"
    other = client.options(
        "/v2/rerank", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    )
    assert "access-control-allow-origin" not in other.headers
    stats = client.get("/v1/stats").json()
    assert stats["refused"] >= 2 and stats["errors"] == 0


def test_health_is_liveness_and_ready_is_readiness(pruner):
    app = create_app(pruner, check=False)
    cold = TestClient(app)  # the lifespan has not run: the batcher is not taking requests
    assert cold.get("/health").status_code == 200 and cold.get("/ready").status_code == 503
    with TestClient(app) as warm:
        assert warm.get("/ready").json()["status"] == "ready"


def test_empty_documents_score_zero_everywhere(client, pruner):
    docs = ["", "   ", "The tower was built in 1889.", "Bananas are yellow."]
    ranked = {r.index: r.relevance for r in pruner.rank(QUERY, docs)}
    assert ranked[0] == ranked[1] == 0.0
    r = client.post("/v2/rerank", json={"query": QUERY, "documents": docs}).json()["results"]
    assert {x["index"]: x["relevance_score"] for x in r}[0] == 0.0 and r[-1]["relevance_score"] == 0.0
    assert pruner.prune(QUERY, docs).passages[1].relevance == 0.0


def test_the_official_cohere_sdk_and_a_tei_client_talk_to_a_live_server(checkpoint):
    cohere = pytest.importorskip("cohere")
    srv = Served(checkpoint, env={"PRUNER_API_KEY": "k3y"})
    try:
        v2 = cohere.ClientV2(api_key="k3y", base_url=srv.url, timeout=30)
        res = v2.rerank(model="pruner", query=QUERY, documents=DOCS, top_n=2)
        assert len(res.results) == 2 and res.results[0].relevance_score >= res.results[1].relevance_score
        v1 = cohere.Client(api_key="k3y", base_url=srv.url, timeout=30)
        res1 = v1.rerank(query=QUERY, documents=[{"text": d} for d in DOCS], top_n=3, return_documents=True)
        assert [r.index for r in res1.results] == [
            r.index for r in v2.rerank(model="m", query=QUERY, documents=DOCS).results
        ]
        with pytest.raises(Exception) as info:
            cohere.ClientV2(api_key="wrong", base_url=srv.url, timeout=30).rerank(
                model="m", query=QUERY, documents=DOCS
            )
        assert "401" in str(info.value)
        import httpx  # a TEI-shaped client: text-embeddings-inference's /rerank body, over the network

        tei = httpx.post(
            srv.url + "/rerank",
            json={"query": QUERY, "texts": DOCS, "truncate": True, "return_text": True},
            headers={"Authorization": "Bearer k3y"},
            timeout=30,
        )
        assert tei.status_code == 200 and [x["index"] for x in tei.json()] == [r.index for r in res1.results]
        assert httpx.get(srv.url + "/info", headers={"Authorization": "Bearer k3y"}).json()["model_id"]
    finally:
        log = srv.stop()
    assert "Traceback" not in log
