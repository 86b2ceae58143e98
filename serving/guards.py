"""The app's guards, as HTTP middlewares: counting every answer (refusals too), the API key, the
declared body size, the body received whole within its size and time, and admission among the
requests in progress."""

from __future__ import annotations

import asyncio
import hmac
import time

from pruner_model.serving.limits import ServerLimits
from pruner_model.serving.metrics import Metrics
from pruner_model.serving.schemas import KNOWN_ROUTES


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
        if 400 <= response.status_code < 500:  # a refusal waits out the refusal delay, holding no slot
            await asyncio.sleep(max(0.0, t0 + limits.refusal_delay_s - time.perf_counter()))
        return response
