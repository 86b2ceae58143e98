"""What every adapter shares: loading a pruner (int8 and the backend included), checking the
adapter's settings when it is built, pruning one query's texts, ranking what is kept by the
relevance head, and the metadata a kept document carries."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from pruner_model.inference.pruner import ContextPruner
from pruner_model.inference.results import PassageResult, PruneResult
from pruner_model.inference.settings import SelectionParams

# how the pruner is loaded (ContextPruner.from_pretrained), as opposed to how it selects
LOADER_OPTIONS = ("backend", "device", "quantized", "dtype", "batch_size")
# the selection settings every adapter has as its own fields, and all of its fields
ADAPTER_SETTINGS = ("threshold", "token_budget", "neighbors")
ADAPTER_FIELDS = (*ADAPTER_SETTINGS, "drop_empty", "top_n", "selection")


def load_pruner(model: str | Path | ContextPruner, **loader) -> ContextPruner:
    """``model`` as is when it is a :class:`ContextPruner`, else loaded from a folder or hub id
    with ``loader`` options (``quantized=True`` serves an ONNX folder's int8 graph, ``backend``,
    ``device``, ``dtype``, ``batch_size``)."""
    unknown = sorted(set(loader) - set(LOADER_OPTIONS))
    if unknown:
        raise TypeError(f"unknown loader option {unknown[0]!r} (known: {', '.join(LOADER_OPTIONS)})")
    given = {k: v for k, v in loader.items() if v is not None}
    if isinstance(model, ContextPruner):
        if given:
            raise ValueError(
                f"{', '.join(given)} apply when the model is loaded here, not to a ContextPruner"
            )
        return model
    key = (str(Path(model).resolve()) if Path(model).exists() else str(model), tuple(sorted(given.items())))
    with _LOCK:  # one instance per (model, loader options) in a process, loaded once even by racing threads
        if key not in _LOADED:
            _LOADED[key] = ContextPruner.from_pretrained(model, **given)
        return _LOADED[key]


_LOCK = threading.Lock()
_LOADED: dict[tuple, ContextPruner] = {}


def split_options(kwargs: dict, fields: Sequence[str]) -> tuple[dict, dict]:
    """``(loader options, adapter fields)`` of an adapter's keyword arguments; anything else is
    a one-line error naming it (a misspelt ``tokens_budget`` must not be ignored)."""
    loader = {k: kwargs.pop(k) for k in list(kwargs) if k in LOADER_OPTIONS}
    unknown = sorted(set(kwargs) - set(fields))
    if unknown:
        known = ", ".join(sorted({*fields, *LOADER_OPTIONS}))
        raise TypeError(
            f"unknown setting {unknown[0]!r} (known: {known}; other selection settings go in selection=)"
        )
    return loader, kwargs


def check_settings(fields: dict, selection: dict) -> dict:
    """The selection settings an adapter prunes with, checked when it is built: ``selection``
    holds :class:`SelectionParams` fields; one set both as an adapter field and in ``selection``
    is an error, not a silent override."""
    twice = sorted(k for k in ADAPTER_SETTINGS if k in selection and fields.get(k) not in (None, 0))
    if twice:
        raise ValueError(f"{twice[0]} is set twice: as the adapter's field and in selection=")
    settings = {**{k: v for k, v in fields.items() if v is not None}, **selection}
    SelectionParams().replace(**settings)  # unknown names and bad values fail here
    return settings


def adapter_settings(adapter) -> dict:
    """:func:`check_settings` of an adapter's own fields and its ``selection``."""
    return check_settings({k: getattr(adapter, k) for k in ADAPTER_SETTINGS}, adapter.selection)


def prune_texts(
    pruner: ContextPruner, query: str, texts: Sequence[str], ids: Sequence[str], settings: dict
) -> PruneResult:
    """One :meth:`ContextPruner.prune` call over a query's passages (judged together)."""
    passages = [{"id": str(i), "text": t} for i, t in zip(ids, texts)]
    return pruner.prune(query, passages, **{k: v for k, v in settings.items() if v is not None})


def kept(result: PruneResult, drop_empty: bool, top_n: int | None) -> list[tuple[int, PassageResult]]:
    """``(input index, passage)`` of what an adapter returns: every passage in input order, or,
    with ``top_n``, the ``top_n`` most relevant by the relevance head, best first (a reranker).
    Passages pruned to nothing are left out when ``drop_empty``."""
    out = [(i, p) for i, p in enumerate(result.passages) if p.text or not drop_empty]
    if top_n is not None:
        if top_n < 1:
            raise ValueError(f"top_n must be >= 1, got {top_n}")
        out = sorted(out, key=lambda ip: -ip[1].relevance)[:top_n]
    return out


def passage_metadata(p: PassageResult, result: PruneResult) -> dict:
    """What the pruner adds to a kept document's metadata (JSON-ready); ``relevance_score`` is
    where LangChain's rerankers (CohereRerank, FlashrankRerank) put theirs."""
    return {
        "relevance_score": p.relevance,
        "pruner_spans": [list(s) for s in p.spans],
        "pruner_sentence_scores": [round(s.score, 6) for s in p.sentences],
        "pruner_relevance": p.relevance,
        "pruner_original_length": p.original_length,
        "pruner_uncertain": result.stats.uncertain,
    }
