"""HTTP serving: the FastAPI app, put together from named steps: the request bodies
(:mod:`~pruner_model.serving.schemas`), the guards (:mod:`~pruner_model.serving.guards`:
admission, API key, body size and time), the request checks (:mod:`~pruner_model.serving.limits`),
micro-batching (:mod:`~pruner_model.serving.batcher`) and three routers: prune
(:mod:`~pruner_model.serving.prune_routes`), rerank (:mod:`~pruner_model.serving.rerank_routes`)
and operations (``/health``, ``/ready``, ``/v1/stats``, ``/metrics``, below).

Each request is checked, segmented and counted against its cost cap (tokens) in a worker thread,
never on the event loop, before it joins a micro-batch; every request has a deadline.
"""

from __future__ import annotations

from pruner_model.inference.budget import served_counters
from pruner_model.inference.pruner import ContextPruner
from pruner_model.serving.batcher import MicroBatcher, self_check
from pruner_model.serving.guards import install_guards
from pruner_model.serving.limits import RequestChecks, ServerLimits
from pruner_model.serving.metrics import Metrics
from pruner_model.serving.prune_routes import prune_router
from pruner_model.serving.rerank_routes import rerank_router
from pruner_model.serving.schemas import validation_error_detail
from pruner_model.serving.state import Served

__all__ = ["RequestChecks", "ServerLimits", "create_app"]


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
    served_counters(limits.budget_tokenizers)  # loaded now: a bad name fails the start, not a request
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
        _allow_origins(app, cors_origins)
    served = Served(pruner, limits, batcher, metrics)
    app.include_router(prune_router(served))
    app.include_router(rerank_router(served))
    app.include_router(operations_router(served))
    app.state.metrics = metrics
    return app


def _allow_origins(app, origins: tuple[str, ...]) -> None:
    """CORS for these browser origins: GET and POST with the key and a JSON body."""
    from fastapi.middleware.cors import CORSMiddleware

    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(origins),
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type"],
    )


def operations_router(served: Served):
    """``/health`` (liveness), ``/ready`` (readiness), ``/v1/stats`` (JSON counters) and
    ``/metrics`` (Prometheus)."""
    from fastapi import APIRouter
    from fastapi.responses import JSONResponse, Response

    router = APIRouter()
    pruner, batcher, metrics = served.pruner, served.batcher, served.metrics

    @router.get("/health")
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

    @router.get("/ready")
    async def ready():
        """Readiness: the model passed its self-check at start and the batcher takes requests
        (503 before, and while shutting down)."""
        if batcher.running:
            return {"status": "ready"}
        return JSONResponse({"status": "unavailable"}, status_code=503)

    @router.get("/v1/stats")
    async def stats():
        return metrics.snapshot()

    @router.get("/metrics")
    async def prometheus_metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return router
