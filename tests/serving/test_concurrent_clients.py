"""No client's request changes another's answer: a real `pruner serve`, six clients sending good
requests at once while others send bodies over the token cap (in tokens only, and 1.9 MB ones)
and cheap malformed ones; every good answer is compared with the same request answered alone."""

from __future__ import annotations

import random
import threading

import httpx
import pytest

from tests.serving.test_reliability import Served

pytestmark = pytest.mark.slow
ROUNDS = 20  # good requests per client
SENTENCES = [
    "The tower was built in 1889 for the world fair.",
    "It is made of wrought iron and painted every seven years.",
    "Gustave Eiffel's company designed and built it.",
    "At first many artists criticised its design.",
    "It was the tallest structure in the world until 1930.",
    "Bananas are yellow and grow in bunches.",
    "The river floods every spring after the snow melts.",
    "Tickets can be bought online or at the gate.",
]


def _request(k: int) -> dict:
    """A different good request per client, long enough that its passages take several windows."""
    passages = [" ".join(SENTENCES[(k + j + i) % len(SENTENCES)] for i in range(6 + 3 * j)) for j in range(3)]
    return {
        "query": ["When was the tower built?", "Who designed it?", "What colour are bananas?"][k % 3],
        "passages": passages,
        "threshold": 0.5,
    }


def _answer(r: httpx.Response) -> tuple:
    body = r.json()
    spans = [[tuple(s[:2]) for s in p["spans"]] for p in body["passages"]]
    scores = [s[2] for p in body["passages"] for s in p["spans"]]
    return body["text"], spans, scores


def test_every_answer_under_load_is_the_answer_given_alone(checkpoint):
    srv = Served(checkpoint, "--max-request-tokens", "2000", "--max-wait-ms", "20")
    try:
        alone = {}
        for k in range(6):
            r = httpx.post(srv.url + "/v1/prune", json=_request(k), timeout=60)
            assert r.status_code == 200, r.text
            alone[k] = _answer(r)
        stop = threading.Event()
        refused: list[int] = []
        answers: dict[int, list] = {k: [] for k in range(6)}

        def good(k):
            with httpx.Client(timeout=60) as c:
                for _ in range(ROUNDS):
                    answers[k].append(c.post(srv.url + "/v1/prune", json=_request(k)))

        def over_cap():  # under the cap in words, over it in tokens: refused once tokenized
            rng = random.Random(0)
            words = ["".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(9)) for _ in range(1500)]
            big = {"query": "q?", "passages": [" ".join(words[i::3]) + "." for i in range(3)]}
            with httpx.Client(timeout=60) as c:
                while not stop.is_set():
                    refused.append(c.post(srv.url + "/v1/prune", json=big).status_code)

        def huge():  # 1.9 MB bodies: refused by their word count before anything is segmented
            body = {"query": "q?", "passages": [" ".join(SENTENCES) * 250] * 19}
            with httpx.Client(timeout=60) as c:
                while not stop.is_set():
                    refused.append(c.post(srv.url + "/v1/prune", json=body).status_code)

        def cheap_bad():
            with httpx.Client(timeout=60) as c:
                while not stop.is_set():
                    refused.append(
                        c.post(
                            srv.url + "/v1/prune",
                            content=b'{"query": "q?", "passages": [1]}',
                            headers={"content-type": "application/json"},
                        ).status_code
                    )

        noisy = [threading.Thread(target=over_cap) for _ in range(2)] + [
            threading.Thread(target=f) for f in (huge, cheap_bad)
        ]
        clients = [threading.Thread(target=good, args=(k,)) for k in range(6)]
        for t in noisy + clients:
            t.start()
        for t in clients:
            t.join()
        stop.set()
        for t in noisy:
            t.join()
        assert refused and set(refused) <= {413, 422}, set(refused)
        assert 413 in refused
        for k in range(6):
            assert [r.status_code for r in answers[k]] == [200] * ROUNDS
            for r in answers[k]:
                text, spans, scores = _answer(r)
                assert (text, spans) == alone[k][:2]
                assert scores == pytest.approx(alone[k][2], abs=1e-4)
    finally:
        log = srv.stop()
    assert "Traceback" not in log, log
