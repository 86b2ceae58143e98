"""The chat transport against a real HTTP endpoint (a scripted OpenAI-compatible server on
127.0.0.1): a deadline bounds the whole call, not each read."""

from __future__ import annotations

import time

import pytest
from pruner_model.core.chat import ChatEndpoint, EndpointSettings, TransportError

from tests.fake_openai import FakeOpenAI


def _body(mode: str) -> dict:
    return {
        "model": "m",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "BEGIN PASSAGE P1"}],
    }


def _endpoint(url: str) -> ChatEndpoint:
    return ChatEndpoint(EndpointSettings(model="m", base_url=url, api_key="", timeout=3.0, max_retries=1))


def test_a_deadline_bounds_the_whole_call_when_the_answer_drips():
    # one byte a second: no single read times out, so only a bound on the call ends it
    with FakeOpenAI(default="drip", slow_seconds=30.0) as fake:
        endpoint = _endpoint(fake.url)
        t0 = time.monotonic()
        with pytest.raises(TransportError, match="out of time"):
            endpoint.complete(_body, deadline=t0 + 3.0)
        took = time.monotonic() - t0
    assert took < 6.0, took


def test_an_answer_within_the_deadline_is_read_and_accounted():
    with FakeOpenAI(default="ok") as fake:
        endpoint = _endpoint(fake.url)
        usage: dict = {}
        content = endpoint.complete(_body, deadline=time.monotonic() + 10.0, usage=usage)
    assert content.startswith('{"P1"')
    assert usage == {"requests": 1, "prompt_tokens": 100, "completion_tokens": 20, "cost": 0.0}
