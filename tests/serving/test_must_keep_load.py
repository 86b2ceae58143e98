"""A request's must_keep patterns share one time budget, on a worker thread: a real `pruner serve`,
one client posting a batch of 64 queries whose pattern takes a good part of a second on each,
while another client's plain requests are answered."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import regex

from tests.serving.test_reliability import Served

pytestmark = pytest.mark.slow
PATTERN = r"(x|xx)+y"  # backtracks exponentially (x1.4 a character) on a run of x without a y
GOOD = {"query": "When was the tower built?", "passages": ["The tower was built in 1889. It is iron."]}


def _slow_text() -> str:
    """A run of x on which PATTERN takes 0.2-0.9 s on this machine (under the 1 s budget alone)."""
    compiled = regex.compile(PATTERN, flags=regex.V0)
    for n in range(14, 40):
        t0 = time.perf_counter()
        compiled.search("x" * n)
        took = time.perf_counter() - t0
        if took >= 0.2:
            assert took < 0.9, (n, took)
            return "The tower " + "x" * n + " was built in 1889."
    raise AssertionError("PATTERN never took 0.2 s")


def test_one_budget_for_a_batch_and_other_clients_answered_meanwhile(checkpoint):
    text = _slow_text()
    batch = {"requests": [{"query": "q?", "passages": [text], "must_keep": [PATTERN]} for _ in range(64)]}
    srv = Served(checkpoint, "--max-wait-ms", "5")
    try:
        result = {}

        def heavy():
            t0 = time.perf_counter()
            r = httpx.post(srv.url + "/v1/prune/batch", json=batch, timeout=120)
            result["code"], result["text"], result["took"] = r.status_code, r.text, time.perf_counter() - t0

        t = threading.Thread(target=heavy)
        t.start()
        codes = []
        with httpx.Client(timeout=60) as c:
            while t.is_alive() and len(codes) < 200:
                codes.append(c.post(srv.url + "/v1/prune", json=GOOD).status_code)
        t.join()
        # each query's pattern fits the budget alone; 64 of them together do not: one 422, soon
        # (a budget per query would answer 200 after 64 x 0.2-0.9 s)
        assert result["code"] == 422 and "must_keep pattern" in result["text"], result
        assert result["took"] < 10.0, result["took"]
        assert codes and set(codes) == {200}, codes
    finally:
        log = srv.stop()
    assert "Traceback" not in log, log
