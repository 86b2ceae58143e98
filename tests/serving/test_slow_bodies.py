"""Slow request bodies never take the slots honest requests need: a real `pruner serve` with 4
slots, 8 clients that send their headers and then one body byte a second, and honest clients
beside them that are all answered."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from tests.serving.test_reliability import Served

pytestmark = pytest.mark.slow
GOOD = {"query": "When was the tower built?", "passages": ["The tower was built in 1889. It is iron."]}


def test_slow_senders_hold_readers_not_slots(checkpoint):
    srv = Served(checkpoint, "--max-concurrency", "4", "--max-readers", "32")
    slow = []
    try:
        for _ in range(8):  # twice the slots, each holding its connection with an unfinished body
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(
                b"POST /v1/prune HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"content-length: 500\r\n\r\n{"
            )
            slow.append(s)
        time.sleep(1.0)
        codes = []
        for _ in range(6):
            codes.append(httpx.post(srv.url + "/v1/prune", json=GOOD, timeout=30).status_code)
            for s in slow:
                s.sendall(b" ")  # one more byte each: still far from the 500 declared
        assert codes == [200] * 6, codes
    finally:
        for s in slow:
            s.close()
        log = srv.stop()
    assert "Traceback" not in log, log


def test_too_many_bodies_at_once_are_a_503_with_the_limit(checkpoint):
    srv = Served(checkpoint, "--max-readers", "2")
    slow = []
    try:
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(
                b"POST /v1/prune HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{"
            )
            slow.append(s)
        time.sleep(1.0)
        r = httpx.post(srv.url + "/v1/prune", json=GOOD, timeout=30)
        assert r.status_code == 503 and "2 request bodies" in r.text
        assert httpx.get(srv.url + "/health", timeout=5).status_code == 200
    finally:
        for s in slow:
            s.close()
        srv.stop()
