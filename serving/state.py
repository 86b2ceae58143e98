"""What the routers of one app share: the pruner, its limits and checks, the batcher, the
counters, and the two ways a route waits (off the event loop, within the deadline)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from pruner_model.inference.pruner import ContextPruner
from pruner_model.serving.batcher import MicroBatcher
from pruner_model.serving.limits import RequestChecks, ServerLimits
from pruner_model.serving.metrics import Metrics


@dataclass
class Served:
    pruner: ContextPruner
    limits: ServerLimits
    batcher: MicroBatcher
    metrics: Metrics
    checks: RequestChecks = field(init=False)

    def __post_init__(self):
        self.checks = RequestChecks(self.pruner, self.limits)

    @staticmethod
    async def off_loop(fn, *args):
        """``fn(*args)`` in the default worker threads: tokenizing never blocks the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def within_deadline(self, awaitable):
        """The awaitable's result, or a 504 once the request's deadline has passed."""
        from fastapi import HTTPException

        try:
            return await asyncio.wait_for(awaitable, self.limits.deadline_s)
        except asyncio.TimeoutError:
            raise HTTPException(
                504, f"not answered within the {self.limits.deadline_s:g} s deadline"
            ) from None
