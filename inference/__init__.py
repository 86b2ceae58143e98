"""Inference: `ContextPruner` over interchangeable backends, typed results, selection steps."""

from .pruner import ContextPruner
from .results import PassageResult, PruneResult, PruneStats, Sentence, Span

__all__ = ["ContextPruner", "PassageResult", "PruneResult", "PruneStats", "Sentence", "Span"]
