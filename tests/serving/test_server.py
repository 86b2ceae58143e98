import json
import threading

import pytest
from fastapi.testclient import TestClient
from pruner_model.inference import ContextPruner
from pruner_model.serving.app import ServerLimits, create_app

pytestmark = pytest.mark.slow

PASSAGES = [
    "Paris is the capital of France. The Eiffel Tower was built in 1889.",
    {"id": "b", "title": "Berlin", "text": "Berlin is the capital of Germany."},
]


@pytest.fixture
def client(tiny_checkpoint):
    pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    app = create_app(
        pruner, ServerLimits(max_body_bytes=20_000, max_passages=4, max_passage_chars=2_000), max_wait_ms=20
    )
    with TestClient(app) as c:
        c.pruner = pruner
        yield c


def test_prune_matches_python_api(client):
    r = client.post(
        "/v1/prune", json={"query": "When was the tower built?", "passages": PASSAGES, "threshold": 0.5}
    )
    assert r.status_code == 200, r.text
    expected = client.pruner.prune("When was the tower built?", PASSAGES, threshold=0.5).to_dict()
    got = r.json()
    assert got["text"] == expected["text"]
    for a, b in zip(got["passages"], expected["passages"]):
        assert [s[:2] for s in a["spans"]] == [s[:2] for s in b["spans"]]
        assert [s[2] for s in a["spans"]] == pytest.approx([s[2] for s in b["spans"]], abs=1e-5)
    assert got["passages"][1]["id"] == "b"


def test_batch_health_metrics(client):
    body = {"requests": [{"query": "q1?", "passages": PASSAGES}, {"query": "q2?", "passages": PASSAGES[:1]}]}
    r = client.post("/v1/prune/batch", json=body)
    assert r.status_code == 200 and len(r.json()["results"]) == 2
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["operating_points"] == {}  # none calibrated in this one
    m = client.get("/v1/stats").json()
    assert m["requests"] == 2 and m["passages"] == 3 and m["latency_ms"]["p50"] > 0


@pytest.mark.parametrize(
    "body,code",
    [
        ({"query": "q", "passages": []}, 422),
        ({"query": "", "passages": ["x"]}, 422),
        ({"query": "   ", "passages": ["x"]}, 422),
        ({"query": "q", "passages": ["x"] * 5}, 422),
        ({"query": "q", "passages": ["x" * 2_001]}, 422),
        ({"query": "q", "passages": ["x"], "threshold": 3}, 422),
        ({"query": "q", "passages": ["x"], "unknown": 1}, 422),
        ({"query": "q", "passages": ["x"], "operating_point": "nq"}, 422),  # not one of the checkpoint's
        ({"query": "q", "passages": [{"title": "no text"}]}, 422),
    ],
)
def test_rejects_bad_requests(client, body, code):
    assert client.post("/v1/prune", json=body).status_code == code


def test_rejects_oversized_and_malformed_bodies(client):
    big = json.dumps({"query": "q", "passages": ["word " * 5000]})
    r = client.post("/v1/prune", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413
    r = client.post("/v1/prune", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_concurrent_burst_is_batched_and_correct(client):
    queries = [f"question number {i}?" for i in range(24)]
    expected = {q: client.pruner.prune(q, PASSAGES, threshold=0.5).to_dict()["passages"] for q in queries}
    results, errors = {}, []

    def worker(q):
        try:
            r = client.post(
                "/v1/prune", json={"query": q, "passages": PASSAGES, "threshold": 0.5}, timeout=60
            )
            results[q] = r
        except Exception as exc:  # recorded and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(q,)) for q in queries]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(results) == len(queries)
    for q, r in results.items():
        assert r.status_code == 200
        got = r.json()
        assert got["query"] == q
        assert [[round(s["score"], 4) for s in p["sentences"]] for p in got["passages"]] == [
            [round(s["score"], 4) for s in p["sentences"]] for p in expected[q]
        ]
    m = client.get("/v1/stats").json()
    assert m["requests"] == len(queries)
    assert m["mean_queries_per_batch"] > 1.0  # requests were scored together


def test_rerank_orders_like_rank_and_prometheus_metrics_parse(client):
    from prometheus_client.parser import text_string_to_metric_families

    docs = ["Bananas are yellow.", "The tower was built in 1889. It is iron.", "Paris is in France."]
    r = client.post("/v1/rerank", json={"query": "When was the tower built?", "documents": docs, "top_n": 2})
    assert r.status_code == 200, r.text
    ranked = client.pruner.rank("When was the tower built?", docs)
    assert [x["index"] for x in r.json()["results"]] == [x.index for x in ranked][:2]
    assert [x["relevance_score"] for x in r.json()["results"]] == pytest.approx(
        [x.relevance for x in ranked][:2], abs=1e-6
    )
    full = client.post(
        "/v1/rerank",
        json={
            "query": "When was the tower built?",
            "documents": docs,
            "return_documents": True,
            "return_pruned": True,
        },
    ).json()["results"]
    assert [x["index"] for x in full] == [x.index for x in ranked]
    assert full[0]["document"]["text"] == docs[full[0]["index"]] and "pruned_text" in full[0]
    # money saved when the caller gives a price
    p = client.post(
        "/v1/prune", json={"query": "q?", "passages": docs, "threshold": 1.0, "price_per_million_tokens": 2.5}
    ).json()
    assert p["stats"]["tokens_saved"] == p["stats"]["tokens_in"] > 0
    assert p["stats"]["cost_saved"] == pytest.approx(p["stats"]["tokens_in"] / 1e6 * 2.5)
    client.post("/v1/prune", json={"query": "q?", "passages": docs, "threshold": 7})  # a 422
    text = client.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    codes = {
        (s.labels["route"], s.labels["code"])
        for s in families["pruner_http_requests"].samples
        if s.name.endswith("_total")
    }
    assert ("/v1/rerank", "200") in codes and ("/v1/prune", "422") in codes
    assert families["pruner_cost_saved_usd"].samples[0].value == pytest.approx(p["stats"]["cost_saved"])
    assert "pruner_request_seconds" in families and "pruner_queries_per_encoder_batch" in families
    stats = client.get("/v1/stats").json()
    assert stats["cost_saved_usd"] == pytest.approx(p["stats"]["cost_saved"])
    assert stats["refused"] >= 1 and stats["errors"] == 0  # a 422 is the client's, not a failure
