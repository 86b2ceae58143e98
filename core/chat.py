"""One chat-completion transport over any OpenAI-compatible endpoint, shared by annotation (the
labeler) and inference (the summarizer of tiered compression): the ``openai`` client with its own
retries off, bounded retries with backoff and jitter that honour ``Retry-After``, a structured
output mode that steps down once when the server does not take it, and token/cost accounting.

Keys come from the settings or the environment and are never logged.
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from pruner_model.core.records import usage_count


@dataclass
class EndpointSettings:
    """How to reach an OpenAI-compatible chat endpoint and what its tokens cost."""

    model: str
    base_url: str | None = None
    api_key: str | None = None  # never logged; None: from OPENAI_API_KEY; "": send no key
    timeout: float = 60.0  # seconds per request
    max_retries: int = 5  # transport retries (429, 5xx, timeouts, connection errors) per request
    backoff_base: float = 0.5  # seconds; doubles each retry, with jitter
    backoff_max: float = 30.0
    temperature: float = 0.0
    max_tokens: int = 512
    structured: str = "auto"  # "json_schema" | "json_object" | "none" | "auto"
    price_prompt: float = 0.0  # per million prompt tokens
    price_completion: float = 0.0  # per million completion tokens


@dataclass
class Accounting:
    groups_done: int = 0
    groups_skipped: int = 0
    groups_rejected: int = 0
    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    invalid_answers: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_cost: float = 0.0
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **kw) -> None:
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lock"}


class _OutOfTime(Exception):
    """The call's deadline passed while its answer was still arriving."""


class _BadAnswer(Exception):
    """The endpoint answered 2xx with a body that is not a chat completion (retried)."""


class TransportError(RuntimeError):
    """The endpoint kept failing after the allowed retries.

    ``unreachable`` is set when the last failure was a failed connection (refused or reset; a
    timeout is a slow endpoint, not a dead one)."""

    def __init__(self, message: str, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable


def openai_client(settings: EndpointSettings):
    """An ``openai.OpenAI`` client for ``settings`` with the library's own retries off."""
    from openai import OpenAI

    return OpenAI(
        base_url=settings.base_url or os.environ.get("OPENAI_BASE_URL"),
        # only the key the caller named: "" (its variable unset) never falls back to
        # OPENAI_API_KEY, which would send that key to a custom endpoint
        api_key=(settings.api_key if settings.api_key is not None else os.environ.get("OPENAI_API_KEY"))
        or "not-needed",
        timeout=settings.timeout,
        max_retries=0,  # retries are ours: bounded, with backoff and Retry-After
    )


class ChatEndpoint:
    """Chat completions with bounded retries and accounting; ``complete(build)`` sends the body
    ``build(mode)`` returns for the current structured-output ``mode``."""

    def __init__(self, settings: EndpointSettings, client=None, sleep: Callable[[float], None] = time.sleep):
        self.s = settings
        self.client = client if client is not None else openai_client(settings)
        self.sleep = sleep
        self.acc = Accounting()
        self.structured = settings.structured
        self._lock = threading.Lock()
        self._answers = 0  # completions the endpoint returned (cache hits excluded)

    def chat_body(self, messages: list[dict], schema: dict, name: str, mode: str) -> dict:
        """The chat-completion request for ``messages``, its answer constrained to ``schema`` by
        the structured-output ``mode`` (``json_schema``, ``json_object`` or none)."""
        body = dict(
            model=self.s.model,
            messages=messages,
            temperature=self.s.temperature,
            max_tokens=self.s.max_tokens,
        )
        if mode in ("auto", "json_schema"):
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
        elif mode in ("json_object", "auto_json_object"):
            # llama.cpp's server constrains decoding to "schema"; other servers ignore it
            body["response_format"] = {"type": "json_object", "schema": schema}
        return body

    def _retry_after(self, exc) -> float | None:
        resp = getattr(exc, "response", None)
        headers = getattr(resp, "headers", None) or {}
        value = headers.get("retry-after") if hasattr(headers, "get") else None
        try:
            delay = float(value) if value is not None else None
        except (TypeError, ValueError):
            return None
        if delay is None or not math.isfinite(delay):
            return None
        return min(max(delay, 0.0), self.s.backoff_max)

    def _create(self, kwargs: dict, deadline: float | None):
        """``chat.completions.create(**kwargs)``, bounded as a whole by ``deadline``: the answer is
        read chunk by chunk and the connection closed once the deadline passes (the client's timeout
        bounds each read only, so an endpoint that sends a byte a second would hold the call for as
        long as it likes)."""
        completions = self.client.chat.completions
        streaming = getattr(getattr(completions, "with_streaming_response", None), "create", None)
        if deadline is None or streaming is None:  # no deadline, or a client without raw responses
            return completions.create(**kwargs)
        from openai.types.chat import ChatCompletion

        body = bytearray()
        with streaming(**kwargs) as raw:
            for chunk in raw.iter_bytes():
                body += chunk
                if time.monotonic() > deadline:
                    raise _OutOfTime
        try:
            data = json.loads(bytes(body))
        except (ValueError, UnicodeDecodeError):
            raise _BadAnswer("the endpoint's answer is not JSON") from None
        if not isinstance(data, dict):
            raise _BadAnswer("the endpoint's answer is not a JSON object")
        return ChatCompletion.construct(**data)

    @staticmethod
    def _refuses_structure(exc, mode: str) -> bool:
        """The server does not take this kind of structured output (``auto`` modes only)."""
        status = getattr(exc, "status_code", None)
        return (
            mode.startswith("auto")
            and status is not None
            and status >= 400
            and (status in (400, 422) or "response_format" in str(exc))
        )

    def _is_retryable(self, exc) -> bool:
        import openai

        if isinstance(exc, _BadAnswer):
            return True
        if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError | openai.RateLimitError):
            return True
        if isinstance(exc, openai.APIStatusError):
            return exc.status_code >= 500 or exc.status_code in (408, 409, 429)
        return False

    def _delay(self, exc: Exception, attempt: int) -> float:
        """Seconds before retry ``attempt``: the server's Retry-After, else exponential backoff
        with jitter."""
        delay = self._retry_after(exc)
        if delay is None:
            delay = min(self.s.backoff_max, self.s.backoff_base * 2 ** (attempt - 1))
            delay *= 0.5 + random.random()  # jitter
        return delay

    def _answered(self, resp, usage: dict | None) -> str:
        """An answer's text, its tokens and cost counted (in ``usage`` too, when given)."""
        with self._lock:
            self._answers += 1
        spent = getattr(resp, "usage", None)
        if spent is not None:
            pt = usage_count(getattr(spent, "prompt_tokens", 0))
            ct = usage_count(getattr(spent, "completion_tokens", 0))
            cost = pt / 1e6 * self.s.price_prompt + ct / 1e6 * self.s.price_completion
            self.acc.add(prompt_tokens=pt, completion_tokens=ct, estimated_cost=cost)
            if usage is not None:
                for k, v in (("prompt_tokens", pt), ("completion_tokens", ct), ("cost", cost)):
                    usage[k] = usage.get(k, 0) + v
        choices = getattr(resp, "choices", None) or []
        return (choices[0].message.content or "") if choices else ""

    def complete(
        self, build: Callable[[str], dict], deadline: float | None = None, usage: dict | None = None
    ) -> str:
        """One chat completion with bounded retries; returns the answer text.

        Args:
            build: the request body for a structured-output mode.
            deadline: a ``time.monotonic()`` time by which to give up: each request's timeout is
                cut to it, and no retry starts that could not finish by it.
            usage: a dict that receives this call's ``prompt_tokens``, ``completion_tokens``,
                ``cost`` and ``requests`` (the accounting of one caller among concurrent ones).

        Raises:
            TransportError: rejected by the endpoint, or still failing after the retries, or out
                of time.
        """
        import openai

        attempt = 0
        while True:
            mode = self.structured
            kwargs = build(mode)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0.05:
                    raise TransportError(f"out of time after {attempt} retries")
                kwargs["timeout"] = min(self.s.timeout, left)
            if usage is not None:
                usage["requests"] = usage.get("requests", 0) + 1
            try:
                self.acc.add(requests=1)
                resp = self._create(kwargs, deadline)
            except Exception as exc:
                if self._refuses_structure(exc, mode):  # step down once to a plainer kind
                    self.structured = "auto_json_object" if mode == "auto" else "none"
                    continue
                if isinstance(exc, _OutOfTime):
                    raise TransportError(f"out of time after {attempt} retries") from None
                if isinstance(exc, openai.BadRequestError):
                    raise TransportError(f"request rejected by the endpoint: {exc.status_code}") from None
                if not self._is_retryable(exc) or attempt >= self.s.max_retries:
                    unreachable = isinstance(exc, openai.APIConnectionError) and not isinstance(
                        exc, openai.APITimeoutError
                    )
                    raise TransportError(
                        f"{type(exc).__name__} after {attempt} retries", unreachable=unreachable
                    ) from None
                attempt += 1
                self.acc.add(retries=1)
                delay = self._delay(exc, attempt)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise TransportError(f"{type(exc).__name__}; no time left to retry") from None
                self.sleep(delay)
                continue
            return self._answered(resp, usage)
