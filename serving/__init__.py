"""Serving: ``pruner serve``'s HTTP app around a :class:`~pruner_model.inference.ContextPruner`.

Owns the app and its guards (admission, API key, body size and time), the request checks and
limits, the prune routes (``/v1/prune``, ``/v1/prune/batch``) and the rerank routes (Cohere v1/v2,
Jina, TEI ``/rerank``, ``/info``) as separate routers, the request bodies, micro-batching, the
counters (``/v1/stats``, ``/metrics``) and uvicorn's header time limit.

May import :mod:`pruner_model.core` and :mod:`pruner_model.inference`; nothing imports it but
the ``pruner serve`` command.
"""

from pruner_model.serving.app import create_app
from pruner_model.serving.limits import RequestChecks, ServerLimits

__all__ = ["RequestChecks", "ServerLimits", "create_app"]
