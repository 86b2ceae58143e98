"""Inference: `ContextPruner` over interchangeable backends, typed results, selection steps."""

from .pruner import ContextPruner, PassageScores, PruneRequest, RankedPassage
from .results import PassageResult, PruneResult, PruneStats, SentenceResult, Span
from .selection import SelectionParams

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
