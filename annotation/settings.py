"""What an annotation run is told (:class:`AnnotatorSettings`) and what it counts
(:class:`Accounting`: groups, requests, retries, tokens and estimated cost)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields


@dataclass
class AnnotatorSettings:
    model: str
    base_url: str | None = None
    api_key: str | None = None  # never logged; None: from OPENAI_API_KEY; "": send no key
    concurrency: int = 4  # requests in flight
    timeout: float = 60.0  # seconds per request
    max_retries: int = 5  # transport retries (429, 5xx, timeouts, connection errors) per request
    max_invalid: int = 2  # extra attempts when the answer is invalid
    backoff_base: float = 0.5  # seconds; doubles each retry, with jitter
    backoff_max: float = 30.0
    max_prompt_tokens: int = 1500  # listwise above this estimate → one call per passage
    temperature: float = 0.0
    max_tokens: int = 512
    structured: str = "auto"  # "json_schema" | "json_object" | "none" | "auto"
    price_prompt: float = 0.0  # per million prompt tokens
    price_completion: float = 0.0  # per million completion tokens
    # groups in a row that fail to connect at all (connection refused or reset, not a timeout)
    # before the run stops as "endpoint down" instead of rejecting every remaining group
    max_connection_failures: int = 3


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
