"""HTTP serving: FastAPI app with request validation, size limits and micro-batching.

Concurrent requests are gathered by a :class:`MicroBatcher` (up to ``max_batch`` requests or
``max_wait_ms`` after the first one) and scored through the encoder together, in one worker
thread, instead of one by one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, create_model

from .pruner import ContextPruner, PruneRequest
from .selection import SelectionParams, selection_body_fields


@dataclass(frozen=True)
class ServerLimits:
    max_body_bytes: int = 2_000_000  # whole request body
    max_passages: int = 64  # passages per query
    max_passage_chars: int = 100_000  # characters per passage
    max_query_chars: int = 2_000
    max_batch_queries: int = 64  # queries per /v1/prune/batch request


class Passage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = None
    title: str | None = None
    text: str


# the request body: the query, its passages and every SelectionParams field (defined once there)
PruneBody = create_model(
    "PruneBody",
    __config__=ConfigDict(extra="forbid"),
    query=(str, Field(min_length=1)),
    passages=(list[str | Passage], Field(min_length=1)),
    **selection_body_fields(),
)


class BatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests: list[PruneBody] = Field(min_length=1)


class Metrics:
    """Counters and a window of recent latencies, safe across threads."""

    def __init__(self, window: int = 2048):
        self.lock = threading.Lock()
        self.requests = self.passages = self.tokens_in = self.tokens_out = self.errors = 0
        self.batches = 0
        self.batched_queries = 0
        self.latencies: deque[float] = deque(maxlen=window)
        self.started = time.time()

    def record(self, latency: float, passages: int, tokens_in: int, tokens_out: int) -> None:
        with self.lock:
            self.requests += 1
            self.passages += passages
            self.tokens_in += tokens_in
            self.tokens_out += tokens_out
            self.latencies.append(latency)

    def snapshot(self) -> dict:
        with self.lock:
            lat = np.array(self.latencies) if self.latencies else np.zeros(1)
            return {
                "requests": self.requests,
                "errors": self.errors,
                "passages": self.passages,
                "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out,
                "compression": 1 - self.tokens_out / self.tokens_in if self.tokens_in else 0.0,
                "encoder_batches": self.batches,
                "mean_queries_per_batch": self.batched_queries / self.batches if self.batches else 0.0,
                "latency_ms": {f"p{q}": float(np.percentile(lat, q) * 1000) for q in (50, 90, 95, 99)},
                "uptime_s": time.time() - self.started,
            }


class MicroBatcher:
    """Collects requests for a short wait and runs them through the pruner together."""

    def __init__(
        self, pruner: ContextPruner, metrics: Metrics, max_batch: int = 32, max_wait_ms: float = 5.0
    ):
        self.pruner = pruner
        self.metrics = metrics
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000
        self.queue: asyncio.Queue | None = None
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        self.queue = asyncio.Queue()
        self.task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()

    async def submit(self, requests: list[PruneRequest]):
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((requests, fut))
        return await fut

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await self.queue.get()]
            n = len(jobs[0][0])
            deadline = loop.time() + self.max_wait
            while n < self.max_batch:
                timeout = deadline - loop.time()
                if timeout <= 0:
                    break
                try:
                    job = await asyncio.wait_for(self.queue.get(), timeout)
                except asyncio.TimeoutError:
                    break
                jobs.append(job)
                n += len(job[0])
            flat = [r for reqs, _ in jobs for r in reqs]
            try:
                results = await loop.run_in_executor(None, self.pruner.run, flat)
            except Exception as exc:  # a bad batch fails its own requests only
                for _, fut in jobs:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            with self.metrics.lock:
                self.metrics.batches += 1
                self.metrics.batched_queries += len(flat)
            k = 0
            for reqs, fut in jobs:
                if not fut.done():
                    fut.set_result(results[k : k + len(reqs)])
                k += len(reqs)


def create_app(
    pruner: ContextPruner,
    limits: ServerLimits | None = None,
    max_batch: int = 32,
    max_wait_ms: float = 5.0,
    batching: bool = True,
):
    """The FastAPI app. ``batching=False`` runs each request alone (for benchmarks)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse

    limits = limits or ServerLimits()
    metrics = Metrics()
    batcher = MicroBatcher(
        pruner, metrics, max_batch=max_batch if batching else 1, max_wait_ms=max_wait_ms if batching else 0.0
    )

    @asynccontextmanager
    async def lifespan(app):
        await batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="pruner", version="0.1.0", lifespan=lifespan)

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limits.max_body_bytes):
            return JSONResponse(
                {"detail": f"request body over {limits.max_body_bytes} bytes"}, status_code=413
            )
        if length is None and request.method == "POST":
            body = b""
            async for chunk in request.stream():
                body += chunk
                if len(body) > limits.max_body_bytes:
                    return JSONResponse(
                        {"detail": f"request body over {limits.max_body_bytes} bytes"}, status_code=413
                    )
            request._body = body
        return await call_next(request)

    def to_request(body: PruneBody) -> PruneRequest:
        if len(body.query) > limits.max_query_chars:
            raise HTTPException(422, f"query over {limits.max_query_chars} characters")
        if not body.query.strip():
            raise HTTPException(422, "query is empty")
        if len(body.passages) > limits.max_passages:
            raise HTTPException(422, f"over {limits.max_passages} passages")
        passages = []
        for i, p in enumerate(body.passages):
            text = p if isinstance(p, str) else p.text
            if len(text) > limits.max_passage_chars:
                raise HTTPException(422, f"passage {i} over {limits.max_passage_chars} characters")
            passages.append(p if isinstance(p, str) else p.model_dump(exclude_none=True))
        settings = body.model_dump(exclude={"query", "passages"}, exclude_unset=True)
        if "must_keep" in settings:
            settings["must_keep"] = tuple(settings["must_keep"])
        try:
            params = pruner.selection_params(SelectionParams(), **settings)
        except (ValueError, TypeError) as exc:
            raise HTTPException(422, str(exc)) from None
        return PruneRequest(body.query, passages, params)

    async def serve(requests: list[PruneRequest]):
        t0 = time.perf_counter()
        try:
            results = await batcher.submit(requests)
        except (ValueError, TypeError) as exc:
            with metrics.lock:
                metrics.errors += 1
            raise HTTPException(422, str(exc)) from None
        latency = time.perf_counter() - t0
        for r in results:
            metrics.record(latency, len(r.passages), r.stats.tokens_in, r.stats.tokens_out)
        return [r.to_dict() for r in results]

    @app.post("/v1/prune")
    async def prune(body: PruneBody):
        return (await serve([to_request(body)]))[0]

    @app.post("/v1/prune/batch")
    async def prune_batch(body: BatchBody):
        if len(body.requests) > limits.max_batch_queries:
            raise HTTPException(422, f"over {limits.max_batch_queries} requests in a batch")
        return {"results": await serve([to_request(b) for b in body.requests])}

    @app.get("/health")
    async def health():
        return {
            "status": "ok",
            "backend": pruner.backend.name,
            "threshold": pruner.config.threshold,
            "max_length": pruner.config.max_length,
        }

    @app.get("/metrics")
    async def get_metrics():
        return metrics.snapshot()

    app.state.metrics = metrics
    return app
