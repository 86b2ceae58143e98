"""A refused request is answered after the refusal delay, holding no slot meanwhile, and good
requests are not delayed: a real `pruner serve` with one slot."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.serving.test_reliability import Served

pytestmark = pytest.mark.slow
GOOD = {"query": "When was the tower built?", "passages": ["The tower was built in 1889. It is iron."]}


def test_a_refusal_waits_out_the_delay_without_its_slot(checkpoint):
    srv = Served(checkpoint, "--max-concurrency", "1", "--refusal-delay", "2")
    try:
        with httpx.Client(timeout=30) as c:
            assert c.post(srv.url + "/v1/prune", json=GOOD).status_code == 200  # warm
            t0 = time.perf_counter()
            assert c.post(srv.url + "/v1/prune", json=GOOD).status_code == 200
            good_took = time.perf_counter() - t0
        refused = {}

        def bad():
            t0 = time.perf_counter()
            r = httpx.post(srv.url + "/v1/prune", content=b'{"query": "q?", "passages": [1', timeout=30)
            refused["code"], refused["took"], refused["end"] = (
                r.status_code,
                time.perf_counter() - t0,
                time.perf_counter(),
            )

        t = threading.Thread(target=bad)
        t.start()
        time.sleep(0.5)  # the refusal is waiting out its delay now
        r = httpx.post(srv.url + "/v1/prune", json=GOOD, timeout=30)
        good_end = time.perf_counter()
        t.join()
        assert r.status_code == 200, r.text  # its one slot was free: not a 503
        assert good_end < refused["end"]  # answered while the refusal was still held back
        assert refused["code"] == 422 and refused["took"] >= 2.0, refused
        assert good_took < 2.0, good_took  # a good request is not held back
    finally:
        log = srv.stop()
    assert "Traceback" not in log, log


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_refusal_delay_stops_serve_with_one_line(checkpoint, value):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pruner_model.cli",
            "serve",
            "--model",
            str(checkpoint),
            "--refusal-delay",
            value,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "--refusal-delay must be >= 0" in out.stderr and "Traceback" not in out.stderr, out.stderr
