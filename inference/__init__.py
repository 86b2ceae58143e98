"""Inference: `ContextPruner` over interchangeable backends, typed results, selection steps."""

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
