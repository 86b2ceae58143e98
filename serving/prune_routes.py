"""The prune routes: ``POST /v1/prune`` (one query) and ``POST /v1/prune/batch`` (several)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from pruner_model.serving.schemas import BatchBody, PruneBody
from pruner_model.serving.state import Served

SUMMARIZER_THREADS = 8  # summarizer calls in flight at once (more wait for a thread, within their deadline)


def prune_router(served: Served):
    """The router; its requests are checked off the event loop, scored in micro-batches and, with
    ``summarize``, passed to the summarizer on threads of their own."""
    from fastapi import APIRouter, HTTPException

    router = APIRouter()
    limits, metrics = served.limits, served.metrics
    # summarizer calls wait on another server: they get threads of their own, so a slow or stuck
    # summarizer can hold only these, never the threads that check and answer plain requests
    summarizer_threads = ThreadPoolExecutor(
        max_workers=SUMMARIZER_THREADS, thread_name_prefix="pruner-summarizer"
    )

    async def serve(bodies: list[PruneBody]) -> list[dict]:
        t0 = time.perf_counter()
        requests = await served.off_loop(served.checks.prune_bodies, bodies)
        try:
            results = await served.within_deadline(served.batcher.submit(requests))
        except (ValueError, TypeError) as exc:
            raise HTTPException(422, str(exc)) from None
        if any(r.params.summarize for r in requests):
            # the middle tier, off the batcher: the summarizer gets what is left of the deadline
            # (less a second to answer); a slow or dead one leaves the plain pruner's output
            left = max(limits.deadline_s - (time.perf_counter() - t0) - 1.0, 0.1)
            params = [r.params for r in requests]
            loop = asyncio.get_running_loop()
            call = loop.run_in_executor(
                summarizer_threads, served.pruner.summarize, results, params, None, left
            )
            try:
                results = await served.within_deadline(call)
            except ValueError as exc:  # a must_keep pattern the fact guard could not run in time
                raise HTTPException(422, str(exc)) from None
        latency = time.perf_counter() - t0
        for r in results:
            metrics.record(
                latency, len(r.passages), r.stats.tokens_in, r.stats.tokens_out, r.stats.cost_saved or 0.0
            )
            if r.stats.summary is not None:
                metrics.record_summary(r.stats.summary)
        return [r.to_dict() for r in results]

    @router.post("/v1/prune")
    async def prune(body: PruneBody):
        return (await serve([body]))[0]

    @router.post("/v1/prune/batch")
    async def prune_batch(body: BatchBody):
        if len(body.requests) > limits.max_batch_queries:
            raise HTTPException(422, f"over {limits.max_batch_queries} requests in a batch")
        return {"results": await serve(list(body.requests))}

    return router
