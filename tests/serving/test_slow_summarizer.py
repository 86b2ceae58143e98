"""A slow summarizer holds only the summarizer's own threads: plain requests from other clients
are answered at once while summarize requests wait on it (a real `pruner serve`, a scripted
OpenAI-compatible summarizer that sends its answers a byte a second, so that no single read
times out)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.fake_openai import FakeOpenAI
from tests.serving.test_reliability import Served

pytestmark = pytest.mark.slow
GOOD = {
    "query": "When was the tower built?",
    "passages": ["The tower was built in 1889. It is iron. It is tall."],
}


def test_plain_requests_are_answered_while_the_summarizer_is_slow(checkpoint, tmp_path):
    with FakeOpenAI(default="drip", slow_seconds=15.0) as fake:
        srv = Served(
            checkpoint,
            "--summarizer-model",
            "m",
            "--summarizer-url",
            fake.url,
            "--summarizer-timeout",
            "3",
            "--deadline",
            "5",
            env={"PRUNER_CACHE": str(tmp_path)},
        )
        try:
            summarize = {**GOOD, "summarize": True, "threshold": 1.0, "summary_threshold": 0.0}
            codes = []

            def ask():
                codes.append(httpx.post(srv.url + "/v1/prune", json=summarize, timeout=60).status_code)

            waiting = [threading.Thread(target=ask) for _ in range(10)]  # more than the worker threads
            for t in waiting:
                t.start()
            time.sleep(1.5)  # every one of them is now waiting on the summarizer
            t0 = time.perf_counter()
            plain = httpx.post(srv.url + "/v1/prune", json=GOOD, timeout=60)
            took = time.perf_counter() - t0
            assert len(fake.requests) >= 6  # the summarizer was asked, and is slow to answer
            assert plain.status_code == 200 and took < 3.0, took
            for t in waiting:
                t.join()
            assert set(codes) <= {200, 504}, codes  # the deadline answers them; none fails
            # each summarizer call was cut at its deadline, not left dripping for 15 s: the
            # summarizer's threads are free again for the next summarize request
            fake.default = "ok"
            t0 = time.perf_counter()
            again = httpx.post(srv.url + "/v1/prune", json=summarize, timeout=60)
            assert again.status_code == 200 and time.perf_counter() - t0 < 4.0, again.text
        finally:
            log = srv.stop()
    assert "Traceback" not in log, log
