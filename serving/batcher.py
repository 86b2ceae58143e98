"""Micro-batching for the HTTP server: concurrent requests are gathered (up to ``max_batch``
requests or ``max_wait_ms`` after the first one) and scored through the encoder together, in one
worker thread. A batch that fails is rerun request by request, so one request's input never fails
another's. The self-check runs one sample before the server reports ready."""

from __future__ import annotations

import asyncio

import numpy as np
from pruner_model.inference.pruner import ContextPruner
from pruner_model.inference.requests import PruneRequest
from pruner_model.serving.metrics import Metrics


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

    @property
    def running(self) -> bool:
        """Whether requests are being taken (started, not stopped, the loop alive)."""
        task = getattr(self, "task", None)
        return task is not None and not task.done()

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
