"""Inference, the library: :class:`ContextPruner` over interchangeable backends (torch, ONNX),
requests and their settings, selection (threshold, neighbours, budgets, tiers), typed results and
the summarizer's client for the middle tier. The HTTP server (:mod:`pruner_model.serving`) and the
ONNX export (:mod:`pruner_model.export`) are built on it.

May import :mod:`pruner_model.core` only.
"""

from pruner_model.inference.pruner import ContextPruner, PassageScores, RankedPassage
from pruner_model.inference.requests import PruneRequest
from pruner_model.inference.results import PassageResult, PruneResult, PruneStats, SentenceResult, Span
from pruner_model.inference.settings import SelectionParams

__all__ = [
    "ContextPruner",
    "PassageResult",
    "PassageScores",
    "PruneRequest",
    "PruneResult",
    "PruneStats",
    "RankedPassage",
    "SelectionParams",
    "SentenceResult",
    "Span",
]
