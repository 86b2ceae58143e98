"""The server's counters: JSON for ``GET /v1/stats``, Prometheus text for ``GET /metrics``."""

from __future__ import annotations

import math
import threading
import time
from collections import deque

import numpy as np


class Metrics:
    """Counters and a window of recent latencies, safe across threads; the same numbers as
    Prometheus metrics in their own registry (``GET /metrics``)."""

    def __init__(self, window: int = 2048):
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.lock = threading.Lock()
        self.requests = self.passages = self.tokens_in = self.tokens_out = self.errors = self.refused = 0
        self.batches = 0
        self.batched_queries = 0
        self.cost_saved = 0.0
        self.summary = {"chunks": 0, "summarized": 0, "guard_fallbacks": 0, "failed": 0, "cache_hits": 0}
        self.summary_tokens_saved = 0
        self.summarizer_cost = 0.0
        self.latencies: deque[float] = deque(maxlen=window)
        self.started = time.time()
        self.registry = r = CollectorRegistry()
        self.http = Counter("pruner_http_requests", "HTTP requests answered", ["route", "code"], registry=r)
        self.latency = Histogram(
            "pruner_request_seconds",
            "time to answer a request",
            ["route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.p_tokens_in = Counter("pruner_tokens_in", "passage tokens received", registry=r)
        self.p_tokens_out = Counter("pruner_tokens_out", "passage tokens kept", registry=r)
        self.p_cost_saved = Counter(
            "pruner_cost_saved_usd", "generator input cost saved (priced requests)", registry=r
        )
        self.p_cost_lost = Counter(
            "pruner_cost_lost_usd",
            "what priced requests cost beyond what they saved (a summarizer that spent more)",
            registry=r,
        )
        self.p_summary = Counter(
            "pruner_summary_chunks", "middle-tier chunks by outcome", ["outcome"], registry=r
        )
        self.p_summary_saved = Counter(
            "pruner_summary_tokens_saved", "tokens the summaries saved over their chunks", registry=r
        )
        self.p_summarizer_cost = Counter(
            "pruner_summarizer_cost_usd", "what the summarizer spent (priced summarizers)", registry=r
        )
        self.p_batch = Histogram(
            "pruner_queries_per_encoder_batch",
            "queries scored together in one encoder batch",
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=r,
        )

    def record(
        self, latency: float, passages: int, tokens_in: int, tokens_out: int, cost_saved: float = 0.0
    ) -> None:
        if not math.isfinite(cost_saved):  # never poison the running sums
            cost_saved = 0.0
        with self.lock:
            self.requests += 1
            self.passages += passages
            self.tokens_in += tokens_in
            self.tokens_out += tokens_out
            self.cost_saved += cost_saved  # net: a request may cost more than it saved
            self.latencies.append(latency)
        self.p_tokens_in.inc(tokens_in)
        self.p_tokens_out.inc(tokens_out)
        if cost_saved > 0:  # a Prometheus counter only rises: losses have their own
            self.p_cost_saved.inc(cost_saved)
        elif cost_saved < 0:
            self.p_cost_lost.inc(-cost_saved)

    def record_summary(self, summary) -> None:
        """One result's middle tier (``PruneStats.summary``): the net saving is ``cost_saved``,
        which already has the summarizer's spend taken off."""
        saved = summary.tokens_in - summary.tokens_out
        cost = summary.cost if math.isfinite(summary.cost) and summary.cost > 0 else 0.0
        with self.lock:
            for k in self.summary:
                self.summary[k] += getattr(summary, k)
            self.summary_tokens_saved += saved
            self.summarizer_cost += cost
        for outcome in ("summarized", "guard_fallbacks", "failed", "not_shorter"):
            n = getattr(summary, outcome)
            if n:
                self.p_summary.labels(outcome).inc(n)
        if saved > 0:
            self.p_summary_saved.inc(saved)
        if cost:
            self.p_summarizer_cost.inc(cost)

    def record_batch(self, queries: int) -> None:
        with self.lock:
            self.batches += 1
            self.batched_queries += queries
        self.p_batch.observe(queries)

    def record_http(self, route: str, code: int, seconds: float) -> None:
        """``errors`` counts the server's failures (5xx); ``refused`` what it turned down (4xx)."""
        if code >= 400:
            with self.lock:
                if code >= 500:
                    self.errors += 1
                else:
                    self.refused += 1
        self.http.labels(route, str(code)).inc()
        self.latency.labels(route).observe(seconds)

    def snapshot(self) -> dict:
        with self.lock:
            lat = np.array(self.latencies) if self.latencies else np.zeros(1)
            return {
                "requests": self.requests,
                "errors": self.errors,
                "refused": self.refused,
                "passages": self.passages,
                "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out,
                "tokens_saved": self.tokens_in - self.tokens_out,
                "cost_saved_usd": self.cost_saved,
                "summary": {
                    **self.summary,
                    "tokens_saved": self.summary_tokens_saved,
                    "summarizer_cost_usd": self.summarizer_cost,
                },
                "compression": 1 - self.tokens_out / self.tokens_in if self.tokens_in else 0.0,
                "encoder_batches": self.batches,
                "mean_queries_per_batch": self.batched_queries / self.batches if self.batches else 0.0,
                "latency_ms": {f"p{q}": float(np.percentile(lat, q) * 1000) for q in (50, 90, 95, 99)},
                "uptime_s": time.time() - self.started,
            }
