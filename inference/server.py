"""HTTP serving: a FastAPI app with request validation, limits, an optional API key and
micro-batching (:mod:`pruner_model.inference.batcher`).

Each request is checked, segmented and counted against its cost cap (tokens) in a worker thread,
never on the event loop, before it joins a micro-batch; every request has a deadline. The app is
put together from named steps: the bodies (:mod:`pruner_model.inference.http_schemas`), the
guards (:func:`install_guards`: admission, API key, body size and time), the request checks
(:class:`RequestChecks`) and the routes.
"""

from __future__ import annotations

import asyncio
import hmac
import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pruner_model.core.alignment import count_tokens
from pruner_model.inference.batcher import MicroBatcher, self_check
from pruner_model.inference.budget import PRUNER, token_counter
from pruner_model.inference.http_schemas import (
    KNOWN_ROUTES,
    BatchBody,
    PruneBody,
    RerankBody,
    TeiRerankBody,
    validation_error_detail,
)
from pruner_model.inference.pruner import ContextPruner
from pruner_model.inference.requests import PruneRequest
from pruner_model.inference.serving_metrics import Metrics
from pruner_model.inference.settings import MUST_KEEP_SECONDS, SelectionParams


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
    # request bodies being received at once (503 above), counted apart from the requests in
    # progress so that slow senders cannot take their slots; each holds at most max_body_bytes
    max_readers: int = 256
    # open connections, idle ones included (uvicorn answers 503 above): well above max_concurrency,
    # so that idle sockets cannot take the slots of requests
    max_connections: int = 1024
    # the budget_tokenizer names a request may choose (loaded at start-up); any other is a 422, so
    # a request cannot make the server load a tokenizer from a path or a hub id of its choosing
    budget_tokenizers: tuple[str, ...] = ()


SUMMARIZER_THREADS = 8  # summarizer calls in flight at once (more wait for a thread, within their deadline)


class RequestChecks:
    """The limits of one request, checked before it reaches the batcher. Raise ``HTTPException``;
    call them from a worker thread (they segment and tokenize the texts)."""

    def __init__(self, pruner: ContextPruner, limits: ServerLimits):
        self.pruner, self.limits = pruner, limits

    @staticmethod
    def _error(code: int, detail: str):
        from fastapi import HTTPException

        return HTTPException(code, detail)

    def texts(self, texts: list[str], noun: str) -> None:
        """The size limits on one query's passages (or rerank documents): 422 with the reason."""
        if len(texts) > self.limits.max_passages:
            raise self._error(422, f"over {self.limits.max_passages} {noun}s")
        for i, text in enumerate(texts):
            if len(text) > self.limits.max_passage_chars:
                raise self._error(422, f"{noun} {i} over {self.limits.max_passage_chars} characters")

    def query(self, query: str) -> None:
        if len(query) > self.limits.max_query_chars:
            raise self._error(422, f"query over {self.limits.max_query_chars} characters")
        if not query.strip():
            raise self._error(422, "query is empty")

    def cheap_cost(self, texts: list[str]) -> None:
        """The token cap by a cheap lower bound first, before anything is segmented or tokenized:
        every whitespace-separated word is at least one token."""
        cap, words = self.limits.max_request_tokens, 0
        for text in texts:
            words += len(text.split())
            if words > cap:
                raise self._error(
                    413,
                    f"request has over {cap} passage words (each at least a token), over the limit of {cap} tokens",
                )

    def cost(self, requests: list[PruneRequest]) -> None:
        """The token cap, counted passage by passage and stopped as soon as it is passed."""
        cap, tokens = self.limits.max_request_tokens, 0
        for text in (p.text for r in requests for p in r.prepared):
            tokens += count_tokens(self.pruner.tokenizer, [text])
            if tokens > cap:
                raise self._error(413, f"request has over {cap} passage tokens, over the limit of {cap}")

    def prepare(
        self, query: str, passages: list, settings: dict, must_keep_deadline: float | None = None
    ) -> PruneRequest:
        """A request checked and segmented now: a batch never fails on this request's text."""
        counter = settings.get("budget_tokenizer")
        if counter not in (None, PRUNER, *self.limits.budget_tokenizers):
            served = ", ".join((PRUNER, *self.limits.budget_tokenizers))
            raise self._error(
                422, f"budget_tokenizer {counter!r} is not served here; this server counts with: {served}"
            )
        if settings.get("summarize") and self.pruner.summarizer is None:
            raise self._error(
                422,
                "summarize: this server has no summarizer (pruner serve --summarizer-model NAME --summarizer-url URL)",
            )
        try:
            params = self.pruner.selection_params(SelectionParams(), **settings)
            return self.pruner.prepare(PruneRequest(query, passages, params), must_keep_deadline)
        except (ValueError, TypeError) as exc:
            raise self._error(422, str(exc)) from None

    def sizes(self, body: PruneBody) -> list[str]:
        """The query's and passages' size limits of one body; its passages' texts."""
        self.query(body.query)
        texts = [p if isinstance(p, str) else p.text for p in body.passages]
        self.texts(texts, "passage")
        return texts

    def prune_body(self, body: PruneBody, must_keep_deadline: float | None = None) -> PruneRequest:
        """One body, its sizes already checked (:meth:`sizes`), checked and segmented."""
        passages = [p if isinstance(p, str) else p.model_dump(exclude_none=True) for p in body.passages]
        settings = body.model_dump(exclude={"query", "passages"}, exclude_unset=True)
        if "must_keep" in settings:
            settings["must_keep"] = tuple(settings["must_keep"])
        return self.prepare(body.query, passages, settings, must_keep_deadline)

    def prune_bodies(self, bodies: list[PruneBody]) -> list[PruneRequest]:
        # cheap measures first: sizes, then words, before any segmenting
        self.cheap_cost([t for b in bodies for t in self.sizes(b)])
        # one must_keep budget for the whole request, however many queries it holds
        deadline = time.monotonic() + MUST_KEEP_SECONDS
        requests = [self.prune_body(b, deadline) for b in bodies]
        self.cost(requests)
        return requests

    def rerank(self, query: str, documents: list[str]) -> PruneRequest:
        self.query(query)
        self.texts(documents, "document")
        self.cheap_cost(documents)
        request = self.prepare(query, list(documents), {})
        self.cost([request])
        return request


# over 60 lines: FastAPI middlewares are closures over the shared admission counter and limits
def install_guards(app, limits: ServerLimits, api_key: str | None, metrics: Metrics) -> None:
    """Middlewares, outermost first: counting (every answer, refusals too), then admission: the
    API key and the declared size, the body received whole (within its size and time, at most
    ``max_readers`` at once), and a slot among ``max_concurrency`` requests in progress; /health
    and /ready always answer."""
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from starlette.requests import ClientDisconnect

    expected = api_key.encode() if api_key else None
    in_flight = 0

    def authorized(header: str) -> bool:
        """``Authorization: Bearer <key>``, the scheme in any case (RFC 9110 11.1)."""
        scheme, _, token = header.strip().partition(" ")
        given = token.strip().encode("latin-1", "replace")
        return scheme.lower() == "bearer" and hmac.compare_digest(given, expected)

    def refuse(code: int, detail: str, **headers) -> JSONResponse:
        return JSONResponse({"detail": detail}, status_code=code, headers=headers or None)

    async def read_body(request: Request) -> JSONResponse | None:
        """The whole body within its size and time limits (413 / 408), kept for the route."""
        body = bytearray()

        async def read() -> JSONResponse | None:
            async for chunk in request.stream():
                body.extend(chunk)
                if len(body) > limits.max_body_bytes:
                    return refuse(413, f"request body over {limits.max_body_bytes} bytes")
            return None

        try:
            too_big = await asyncio.wait_for(read(), limits.body_timeout_s)
        except asyncio.TimeoutError:
            return refuse(408, f"request body not received within {limits.body_timeout_s:g} s")
        except ClientDisconnect:  # gone before its body was whole: nothing to answer, nothing to log
            return refuse(400, "client disconnected before its request body was complete")
        request._body = bytes(body)
        return too_big

    def checked_headers(request: Request) -> JSONResponse | None:
        """The API key and the declared body size: refused before anything is read."""
        if expected is not None and request.url.path not in ("/health", "/ready"):
            if not authorized(request.headers.get("authorization", "")):
                return refuse(401, "missing or wrong API key (Authorization: Bearer ...)")
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limits.max_body_bytes):
            return refuse(413, f"request body over {limits.max_body_bytes} bytes")
        return None

    reading = 0  # bodies being received: counted apart from the requests in progress

    @app.middleware("http")
    async def admit(request: Request, call_next):
        """Headers checked, then the whole body received (bounded in size, time and in how many
        are received at once), and only then a slot among ``max_concurrency``: a client that
        sends its body slowly holds a reader, never a slot that honest requests need."""
        nonlocal in_flight, reading
        if request.url.path in ("/health", "/ready"):
            return await call_next(request)
        refused = checked_headers(request)
        if refused is not None:
            return refused
        if request.method == "POST":
            if reading >= limits.max_readers:
                return refuse(
                    503,
                    f"over {limits.max_readers} request bodies being received: retry shortly",
                    **{"Retry-After": "1"},
                )
            reading += 1
            try:
                refused = await read_body(request)
            finally:
                reading -= 1
            if refused is not None:
                return refused
        if in_flight >= limits.max_concurrency:
            return refuse(
                503,
                f"over {limits.max_concurrency} requests in progress: retry shortly",
                **{"Retry-After": "1"},
            )
        in_flight += 1
        try:
            return await call_next(request)
        finally:
            in_flight -= 1

    @app.middleware("http")  # added last, so outermost: it also counts what the guards refuse
    async def count(request: Request, call_next):
        t0 = time.perf_counter()
        response = await call_next(request)
        route = request.url.path if request.url.path in KNOWN_ROUTES else "other"
        metrics.record_http(route, response.status_code, time.perf_counter() - t0)
        return response


def create_app(
    pruner: ContextPruner,
    limits: ServerLimits | None = None,
    max_batch: int = 32,
    max_wait_ms: float = 5.0,
    batching: bool = True,
    api_key: str | None = None,
    check: bool = True,
    cors_origins: tuple[str, ...] = (),
):
    """The FastAPI app. ``batching=False`` runs each request alone (for benchmarks); with
    ``api_key`` every route but ``/health`` needs ``Authorization: Bearer <api_key>``; ``check``
    runs :func:`self_check` first; ``cors_origins`` are the browser origins allowed to call it
    (none by default: same-origin only).

    Raises:
        RuntimeError: the self-check failed (the model cannot serve).
    """
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    limits = limits or ServerLimits()
    for name in limits.budget_tokenizers:  # loaded now: a bad name fails the start, not a request
        token_counter(name)
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

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, exc: RequestValidationError):
        return JSONResponse({"detail": validation_error_detail(exc)}, status_code=422)

    install_guards(app, limits, api_key, metrics)
    if cors_origins:  # added last, so outermost: a preflight is answered before the key check
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    add_routes(app, pruner, limits, batcher, metrics)
    app.state.metrics = metrics
    return app


# over 60 lines: FastAPI routes are closures over the pruner, batcher and metrics they share
def add_routes(
    app, pruner: ContextPruner, limits: ServerLimits, batcher: MicroBatcher, metrics: Metrics
) -> None:
    """/v1/prune, /v1/prune/batch, /v1/rerank, /health, /v1/stats and /metrics."""
    from fastapi import HTTPException
    from fastapi.responses import JSONResponse, Response

    from pruner_model import __version__

    checks = RequestChecks(pruner, limits)

    async def off_loop(fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    # summarizer calls wait on another server: they get threads of their own, so a slow or stuck
    # summarizer can hold only these, never the threads that check and answer plain requests
    summarizer_threads = ThreadPoolExecutor(
        max_workers=SUMMARIZER_THREADS, thread_name_prefix="pruner-summarizer"
    )

    async def within_deadline(awaitable):
        try:
            return await asyncio.wait_for(awaitable, limits.deadline_s)
        except asyncio.TimeoutError:
            raise HTTPException(504, f"not answered within the {limits.deadline_s:g} s deadline") from None

    async def serve(bodies: list[PruneBody]) -> list[dict]:
        t0 = time.perf_counter()
        requests = await off_loop(checks.prune_bodies, bodies)
        try:
            results = await within_deadline(batcher.submit(requests))
        except (ValueError, TypeError) as exc:
            raise HTTPException(422, str(exc)) from None
        if any(r.params.summarize for r in requests):
            # the middle tier, off the batcher: the summarizer gets what is left of the deadline
            # (less a second to answer); a slow or dead one leaves the plain pruner's output
            left = max(limits.deadline_s - (time.perf_counter() - t0) - 1.0, 0.1)
            params = [r.params for r in requests]
            loop = asyncio.get_running_loop()
            call = loop.run_in_executor(summarizer_threads, pruner.summarize, results, params, None, left)
            results = await within_deadline(call)
        latency = time.perf_counter() - t0
        for r in results:
            metrics.record(
                latency, len(r.passages), r.stats.tokens_in, r.stats.tokens_out, r.stats.cost_saved or 0.0
            )
            if r.stats.summary is not None:
                metrics.record_summary(r.stats.summary)
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
        """Liveness: the process answers."""
        cfg = pruner.config
        return {
            "status": "ok",
            "backend": pruner.backend.name,
            "precision": pruner.precision,
            "threshold": cfg.threshold,
            "operating_points": dict(getattr(cfg, "operating_points", None) or {}),
            "max_length": cfg.max_length,
        }

    @app.get("/ready")
    async def ready():
        """Readiness: the model passed its self-check at start and the batcher takes requests
        (503 before, and while shutting down)."""
        if batcher.running:
            return {"status": "ready"}
        return JSONResponse({"status": "unavailable"}, status_code=503)

    async def rerank_scores(query: str, documents: list[str], pruned: bool):
        """Relevance of each document (the relevance head, the order of ContextPruner.rank), and
        the pruned result when asked."""
        request = await off_loop(checks.rerank, query, documents)
        if pruned:
            result = (await within_deadline(batcher.submit([request])))[0]
            return [p.relevance for p in result.passages], result
        ranked = await within_deadline(off_loop(pruner.rank, query, list(documents)))
        relevance = [0.0] * len(documents)
        for r in ranked:
            relevance[r.index] = r.relevance
        return relevance, None

    @app.post("/v1/rerank")
    @app.post("/v2/rerank")
    async def rerank(body: RerankBody):
        """Cohere (v1, v2) and Jina rerank: ``{"results": [{"index", "relevance_score", ...}]}``."""
        documents = body.texts()
        relevance, result = await rerank_scores(body.query, documents, body.return_pruned)
        return {
            "id": uuid.uuid4().hex,
            "model": body.model or pruner.config.name_or_path or "pruner",
            "results": _rerank_results(body, documents, relevance, result),
            "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
        }

    @app.post("/rerank")
    async def tei_rerank(body: TeiRerankBody):
        """Text-embeddings-inference rerank: ``[{"index", "score", "text"?}]``, best first."""
        relevance, _ = await rerank_scores(body.query, body.texts, False)
        out = []
        for i in sorted(range(len(relevance)), key=lambda i: -relevance[i]):
            score = _logit(relevance[i]) if body.raw_scores else relevance[i]
            out.append({"index": i, "score": score, **({"text": body.texts[i]} if body.return_text else {})})
        return out

    @app.get("/info")
    async def info():
        """Text-embeddings-inference's model description, for clients that read it."""
        cfg = pruner.config
        return {
            "model_id": cfg.name_or_path or "pruner",
            "model_type": {"reranker": {"id2label": {"0": "relevance"}}},
            "model_dtype": pruner.precision,
            "backend": pruner.backend.name,
            "max_input_length": cfg.max_length,
            "max_client_batch_size": limits.max_passages,
            "max_batch_tokens": limits.max_request_tokens,
            "threshold": cfg.threshold,
            "version": __version__,
        }

    @app.get("/v1/stats")
    async def stats():
        return metrics.snapshot()

    @app.get("/metrics")
    async def prometheus_metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _logit(p: float) -> float:
    p = min(max(p, 1e-7), 1 - 1e-7)
    return float(math.log(p / (1 - p)))


def _rerank_results(body: RerankBody, documents: list[str], relevance: list[float], pruned) -> list[dict]:
    order = sorted(range(len(relevance)), key=lambda i: -relevance[i])[: body.top_n]
    results = []
    for i in order:
        item = {"index": i, "relevance_score": relevance[i]}
        if body.return_documents:
            item["document"] = {"text": documents[i]}
        if pruned is not None:
            item["pruned_text"] = pruned.passages[i].text
        results.append(item)
    return results
