"""HTTP serving: FastAPI app with request validation, limits, an optional API key and
micro-batching.

Concurrent requests are gathered by a :class:`MicroBatcher` (up to ``max_batch`` requests or
``max_wait_ms`` after the first one) and scored through the encoder together, in one worker
thread, instead of one by one. Each request is validated and segmented before it joins a batch,
and a batch that still fails is rerun request by request, so one request's input never fails
another's. Every request has a cost cap (tokens) and a deadline.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, create_model

from .pruner import ContextPruner, PruneRequest
from .selection import SelectionParams, selection_body_fields
from .serving_metrics import Metrics


@dataclass(frozen=True)
class ServerLimits:
    max_body_bytes: int = 2_000_000  # whole request body
    max_passages: int = 64  # passages per query
    max_passage_chars: int = 100_000  # characters per passage
    max_query_chars: int = 2_000
    max_batch_queries: int = 64  # queries per /v1/prune/batch request
    max_request_tokens: int = 60_000  # passage tokens per HTTP request (all its queries): the compute cap
    deadline_s: float = 30.0  # a request not answered by then gets a 504
    body_timeout_s: float = 10.0  # a client that has not sent its whole body by then gets a 408
    header_timeout_s: float = 10.0  # a connection whose request headers are not complete by then is closed
    max_concurrency: int = 64  # requests in progress at once (503 above); /health is not counted
    # open connections, idle ones included (uvicorn answers 503 above): well above max_concurrency,
    # so that idle sockets cannot take the slots of requests
    max_connections: int = 1024


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


class RerankBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1)
    documents: list[str] = Field(min_length=1)
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False
    return_pruned: bool = False  # also prune each document (selection at the checkpoint's settings)


KNOWN_ROUTES = {"/v1/prune", "/v1/prune/batch", "/v1/rerank", "/v1/stats", "/metrics", "/health"}


class BatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests: list[PruneBody] = Field(min_length=1)


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
            jobs = [(reqs, fut) for reqs, fut in jobs if not fut.done()]  # timed-out clients are gone
            if not jobs:
                continue
            flat = [r for reqs, _ in jobs for r in reqs]
            try:
                results = await loop.run_in_executor(None, self.pruner.run, flat)
            except Exception:  # isolate the faulty request: rerun each job alone
                for reqs, fut in jobs:
                    try:
                        alone = await loop.run_in_executor(None, self.pruner.run, reqs)
                    except Exception as exc:
                        if not fut.done():
                            fut.set_exception(exc)
                    else:
                        if not fut.done():
                            fut.set_result(alone)
                continue
            self.metrics.record_batch(len(flat))
            k = 0
            for reqs, fut in jobs:
                if not fut.done():
                    fut.set_result(results[k : k + len(reqs)])
                k += len(reqs)


def self_check(pruner: ContextPruner) -> None:
    """Run one sample through the backend; a broken model (wrong graph, NaN weights) raises a
    one-line RuntimeError here, before the server reports ready."""
    try:
        result = pruner.prune(
            "When was the tower built?",
            ["The tower was built in 1889. It is made of iron.", "Bananas are yellow."],
            dedup=False,
        )
    except Exception as exc:
        raise RuntimeError(
            f"model self-check failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        ) from None
    scores = [s.score for p in result.passages for s in p.sentences] + [p.relevance for p in result.passages]
    if not scores or not np.all(np.isfinite(scores)):
        raise RuntimeError("model self-check failed: the model returns non-finite scores")


def _validation_error_detail(exc) -> list[dict]:
    """Pydantic errors without the offending input (it may not even be encodable)."""
    out = []
    for e in exc.errors():
        if tuple(e.get("loc", ())) == ("body",) and e.get("type") in ("model_attributes_type", "dict_type"):
            out.append(
                {"field": "", "error": "the body must be a JSON object (content-type: application/json)"}
            )
            continue
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        out.append({"field": loc, "error": str(e.get("msg", "invalid"))[:200]})
    return out


def create_app(
    pruner: ContextPruner,
    limits: ServerLimits | None = None,
    max_batch: int = 32,
    max_wait_ms: float = 5.0,
    batching: bool = True,
    api_key: str | None = None,
    check: bool = True,
):
    """The FastAPI app. ``batching=False`` runs each request alone (for benchmarks); with
    ``api_key`` every route but ``/health`` needs ``Authorization: Bearer <api_key>``; ``check``
    runs :func:`self_check` first.

    Raises:
        RuntimeError: the self-check failed (the model cannot serve).
    """
    import hmac
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    limits = limits or ServerLimits()
    if check:
        self_check(pruner)
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
    expected = api_key.encode() if api_key else None

    def authorized(header: str) -> bool:
        """``Authorization: Bearer <key>``, the scheme in any case (RFC 9110 11.1)."""
        scheme, _, token = header.strip().partition(" ")
        given = token.strip().encode("latin-1", "replace")
        return scheme.lower() == "bearer" and hmac.compare_digest(given, expected)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        return JSONResponse({"detail": _validation_error_detail(exc)}, status_code=422)

    in_flight = 0

    @app.middleware("http")
    async def admit(request: Request, call_next):
        """At most ``limits.max_concurrency`` requests in progress; /health always answers."""
        nonlocal in_flight
        if request.url.path == "/health":
            return await call_next(request)
        if in_flight >= limits.max_concurrency:
            return JSONResponse(
                {"detail": f"over {limits.max_concurrency} requests in progress: retry shortly"},
                status_code=503,
                headers={"Retry-After": "1"},
            )
        in_flight += 1
        try:
            return await guard(request, call_next)
        finally:
            in_flight -= 1

    async def guard(request: Request, call_next):
        if expected is not None and request.url.path != "/health":
            if not authorized(request.headers.get("authorization", "")):
                return JSONResponse(
                    {"detail": "missing or wrong API key (Authorization: Bearer ...)"}, status_code=401
                )
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limits.max_body_bytes):
            return JSONResponse(
                {"detail": f"request body over {limits.max_body_bytes} bytes"}, status_code=413
            )
        if request.method == "POST":
            body = bytearray()

            async def read() -> JSONResponse | None:
                async for chunk in request.stream():
                    body.extend(chunk)
                    if len(body) > limits.max_body_bytes:
                        return JSONResponse(
                            {"detail": f"request body over {limits.max_body_bytes} bytes"}, status_code=413
                        )
                return None

            try:
                too_big = await asyncio.wait_for(read(), limits.body_timeout_s)
            except asyncio.TimeoutError:
                return JSONResponse(
                    {"detail": f"request body not received within {limits.body_timeout_s:g} s"},
                    status_code=408,
                )
            if too_big is not None:
                return too_big
            request._body = bytes(body)
        return await call_next(request)

    # added last, so outermost: it also counts what the guard refuses
    @app.middleware("http")
    async def count(request: Request, call_next):
        t0 = time.perf_counter()
        response = await call_next(request)
        route = request.url.path if request.url.path in KNOWN_ROUTES else "other"
        metrics.record_http(route, response.status_code, time.perf_counter() - t0)
        return response

    def check_texts(texts: list[str], noun: str) -> None:
        """The size limits on one query's passages (or rerank documents): 422 with the reason."""
        if len(texts) > limits.max_passages:
            raise HTTPException(422, f"over {limits.max_passages} {noun}s")
        for i, text in enumerate(texts):
            if len(text) > limits.max_passage_chars:
                raise HTTPException(422, f"{noun} {i} over {limits.max_passage_chars} characters")

    def check_query(query: str) -> None:
        if len(query) > limits.max_query_chars:
            raise HTTPException(422, f"query over {limits.max_query_chars} characters")
        if not query.strip():
            raise HTTPException(422, "query is empty")

    def to_request(body: PruneBody) -> PruneRequest:
        """Checked, segmented and limited: runs off the event loop (segmentation of large texts
        takes time that /health must not wait for)."""
        check_query(body.query)
        check_texts([p if isinstance(p, str) else p.text for p in body.passages], "passage")
        passages = [p if isinstance(p, str) else p.model_dump(exclude_none=True) for p in body.passages]
        settings = body.model_dump(exclude={"query", "passages"}, exclude_unset=True)
        if "must_keep" in settings:
            settings["must_keep"] = tuple(settings["must_keep"])
        try:
            params = pruner.selection_params(SelectionParams(), **settings)
            # checked and segmented now: a batch never fails on this request's text
            return pruner.prepare(PruneRequest(body.query, passages, params))
        except (ValueError, TypeError) as exc:
            raise HTTPException(422, str(exc)) from None

    def check_cost(requests: list[PruneRequest]) -> None:
        from pruner_model.alignment import count_tokens

        tokens = count_tokens(pruner.tokenizer, [p.text for r in requests for p in r.prepared])
        if tokens > limits.max_request_tokens:
            raise HTTPException(
                413, f"request has {tokens} passage tokens, over the limit of {limits.max_request_tokens}"
            )

    def prepared(bodies: list[PruneBody]) -> list[PruneRequest]:
        requests = [to_request(b) for b in bodies]
        check_cost(requests)
        return requests

    async def serve(bodies: list[PruneBody]):
        t0 = time.perf_counter()
        # every check that reads the texts (segmentation, token counts) runs in a worker thread
        requests = await asyncio.get_running_loop().run_in_executor(None, prepared, bodies)
        try:
            results = await asyncio.wait_for(batcher.submit(requests), limits.deadline_s)
        except asyncio.TimeoutError:
            raise HTTPException(504, f"not answered within the {limits.deadline_s:g} s deadline") from None
        except (ValueError, TypeError) as exc:
            raise HTTPException(422, str(exc)) from None
        latency = time.perf_counter() - t0
        for r in results:
            metrics.record(
                latency, len(r.passages), r.stats.tokens_in, r.stats.tokens_out, r.stats.cost_saved or 0.0
            )
        return [r.to_dict() for r in results]

    @app.post("/v1/prune")
    async def prune(body: PruneBody):
        return (await serve([body]))[0]

    @app.post("/v1/prune/batch")
    async def prune_batch(body: BatchBody):
        if len(body.requests) > limits.max_batch_queries:
            raise HTTPException(422, f"over {limits.max_batch_queries} requests in a batch")
        return {"results": await serve(list(body.requests))}

    @app.get("/health")
    async def health():
        return {
            "status": "ok",
            "backend": pruner.backend.name,
            "threshold": pruner.config.threshold,
            "max_length": pruner.config.max_length,
        }

    @app.post("/v1/rerank")
    async def rerank(body: RerankBody):
        """Cohere/TEI-shaped reranking by the relevance head (the order of ContextPruner.rank)."""

        def prepare_rerank() -> PruneRequest:
            check_query(body.query)
            check_texts(body.documents, "document")
            try:
                req = pruner.prepare(
                    PruneRequest(body.query, list(body.documents), pruner.selection_params())
                )
            except (ValueError, TypeError) as exc:
                raise HTTPException(422, str(exc)) from None
            check_cost([req])
            return req

        loop = asyncio.get_running_loop()
        req = await loop.run_in_executor(None, prepare_rerank)
        try:
            if body.return_pruned:
                result = (await asyncio.wait_for(batcher.submit([req]), limits.deadline_s))[0]
                relevance = [p.relevance for p in result.passages]
            else:
                fut = loop.run_in_executor(None, pruner.rank, body.query, list(body.documents))
                ranked = await asyncio.wait_for(fut, limits.deadline_s)
                relevance = [0.0] * len(body.documents)
                for r in ranked:
                    relevance[r.index] = r.relevance
        except asyncio.TimeoutError:
            raise HTTPException(504, f"not answered within the {limits.deadline_s:g} s deadline") from None
        order = sorted(range(len(relevance)), key=lambda i: -relevance[i])[: body.top_n]
        results = []
        for i in order:
            item = {"index": i, "relevance_score": relevance[i]}
            if body.return_documents:
                item["document"] = {"text": body.documents[i]}
            if body.return_pruned:
                item["pruned_text"] = result.passages[i].text
            results.append(item)
        return {"results": results}

    @app.get("/v1/stats")
    async def stats():
        return metrics.snapshot()

    @app.get("/metrics")
    async def prometheus_metrics():
        from fastapi.responses import Response
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.state.metrics = metrics
    return app
