"""Typed results of :meth:`ContextPruner.prune`: frozen dataclasses with one ``to_dict()``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import NamedTuple

import numpy as np
from pruner_model.core.segmentation import Unit


class Span(NamedTuple):
    """A kept character span ``text[start:end]`` of a passage and its score (max of its units)."""

    start: int
    end: int
    score: float


@dataclass(frozen=True, slots=True)
class SentenceResult:
    """One unit of a passage, with its score and the keep decision."""

    index: int
    start: int
    end: int
    score: float
    kept: bool
    kind: str = "sentence"
    tokens: int = 0  # tokens of the unit (the pruner's tokenizer, or the budget_tokenizer)
    tier: str | None = None  # with summarize: "verbatim", "summarized" or "dropped"


@dataclass(frozen=True, slots=True)
class SummaryPart:
    """A middle-tier chunk of a passage (``source_text[start:end]``) and the summary that stands
    for it in the pruned text."""

    start: int
    end: int
    text: str  # the summary
    tokens_in: int  # tokens of the chunk
    tokens_out: int  # tokens of the summary


@dataclass(frozen=True, slots=True)
class PassageResult:
    id: str
    title: str | None
    text: str  # the pruned text of this passage ("" when nothing is kept)
    spans: tuple[Span, ...]
    sentences: tuple[SentenceResult, ...]
    relevance: float  # passage relevance probability (max over windows)
    original_length: int  # characters in the original passage
    source_text: str = field(default="", repr=False, compare=False)  # the input text (not in to_dict)
    summaries: tuple[SummaryPart, ...] = ()  # with summarize: the summarized chunks, in order


@dataclass(frozen=True, slots=True)
class SummaryStats:
    """What the middle tier did for one query (``PruneStats.summary`` with summarize on)."""

    chunks: int = 0  # middle-tier chunks that survived the budget
    summarized: int = 0  # chunks whose summary stands in the text
    guard_fallbacks: int = 0  # summaries that lost a number, date, id, URL or must_keep match: verbatim
    not_shorter: int = 0  # summaries no shorter than their chunk: verbatim
    failed: int = 0  # chunks without a summary (endpoint down, slow, or no answer for them): dropped
    tokens_in: int = 0  # tokens of the summarized chunks
    tokens_out: int = 0  # tokens of their summaries
    cache_hits: int = 0
    calls: int = 0  # summarizer requests sent
    cost: float = 0.0  # USD the summarizer spent (with its prices)
    seconds: float = 0.0
    error: str | None = None  # why the middle tier was (partly) dropped


@dataclass(frozen=True, slots=True)
class PruneStats:
    tokens_in: int
    tokens_out: int
    compression: float  # 1 - tokens_out / tokens_in
    sentences_in: int
    sentences_out: int
    duplicates_removed: int
    encoder_seconds: float
    postprocess_seconds: float
    confidence: float = 0.0  # the query's best unit score (what "no sentence stands out" is judged on)
    uncertain: bool = False  # confidence under the checkpoint's uncertainty threshold: a pipeline
    # may fall back to the unpruned context (or ask prune() for if_uncertain="keep_all")
    tokens_saved: int = 0  # tokens_in - tokens_out (model tokenizer)
    cost_saved: float | None = None  # USD, when prune() was given price_per_million_tokens (net of
    # the summarizer's spend with summarize on)
    summary: SummaryStats | None = None  # with summarize: the middle tier's accounting
    unfamiliar: bool = False  # the checkpoint's per-request threshold read the request as unlike all
    # of its calibration text and thresholded it at its safest threshold (core/threshold_model.py)


@dataclass(frozen=True, slots=True)
class PruneResult:
    query: str
    text: str  # the assembled pruned context, passages separated by a blank line
    passages: tuple[PassageResult, ...]
    stats: PruneStats
    threshold: float

    def to_dict(self) -> dict:
        """JSON-ready nested dict (spans as ``[start, end, score]`` lists)."""
        out = asdict(self)
        tiered = self.stats.summary is not None  # without summarize, exactly the plain pruner's keys
        if not tiered:
            out["stats"].pop("summary")
        for p in out["passages"]:
            p.pop("source_text")
            p["spans"] = [list(s) for s in p["spans"]]
            if not tiered:
                p.pop("summaries")
                for s in p["sentences"]:
                    s.pop("tier")
        return out

    def _repr_html_(self) -> str:
        """Kept sentences highlighted, scores on hover (what a notebook shows for a result)."""
        from pruner_model.inference.html import render_fragment

        return render_fragment(self)


class PassageScores(NamedTuple):
    """What :meth:`ContextPruner.score` returns."""

    sentence_scores: list[np.ndarray]  # per passage: [n_units] scores
    relevance: np.ndarray  # [n_passages] relevance probabilities
    units: list[list[Unit]]  # per passage: the scored units (char offsets)


class RankedPassage(NamedTuple):
    """One entry of :meth:`ContextPruner.rank`."""

    index: int  # position in the input passages
    id: str
    relevance: float


def join_spans(text: str, spans) -> str:
    """Kept spans of a passage joined by a newline where the original gap had one, else a space."""
    return join_pieces(text, [(s, e, text[s:e]) for s, e, _ in spans])


def join_pieces(text: str, pieces) -> str:
    """``(start, end, string)`` pieces of ``text``, in document order, joined by a newline where
    the original gap between them had one, else a space (a piece's string may stand for its
    span, as a summary does)."""
    parts = []
    for k, (s, _, piece) in enumerate(pieces):
        if k:
            parts.append("\n" if "\n" in text[pieces[k - 1][1] : s] else " ")
        parts.append(piece)
    return "".join(parts)


def with_timings(result: PruneResult, encoder: float, post: float) -> PruneResult:
    return replace(result, stats=replace(result.stats, encoder_seconds=encoder, postprocess_seconds=post))
