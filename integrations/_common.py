"""What every adapter shares: loading a pruner, pruning one query's texts with the adapter's
settings, and the metadata a kept document carries."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pruner_model.inference.pruner import ContextPruner
from pruner_model.inference.results import PassageResult, PruneResult


def load_pruner(model: str | Path | ContextPruner, **kwargs) -> ContextPruner:
    """``model`` as is when it is a :class:`ContextPruner`, else loaded from a folder or hub id."""
    return model if isinstance(model, ContextPruner) else ContextPruner.from_pretrained(model, **kwargs)


def prune_texts(
    pruner: ContextPruner, query: str, texts: Sequence[str], ids: Sequence[str], settings: dict
) -> PruneResult:
    """One :meth:`ContextPruner.prune` call over a query's passages (judged together)."""
    passages = [{"id": str(i), "text": t} for i, t in zip(ids, texts)]
    return pruner.prune(query, passages, **{k: v for k, v in settings.items() if v is not None})


def passage_metadata(p: PassageResult, result: PruneResult) -> dict:
    """What the pruner adds to a kept document's metadata (JSON-ready)."""
    return {
        "pruner_spans": [list(s) for s in p.spans],
        "pruner_sentence_scores": [round(s.score, 6) for s in p.sentences],
        "pruner_relevance": p.relevance,
        "pruner_original_length": p.original_length,
        "pruner_uncertain": result.stats.uncertain,
    }
