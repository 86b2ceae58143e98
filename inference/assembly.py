"""A request's typed result assembled from its scored units and the selection's decisions:
the units of its passages flattened for selection, each passage's result, the request's stats."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from pruner_model.core.score_rules import contrasted_relevance, relevance_weighted
from pruner_model.core.scoring import PairScores
from pruner_model.inference.requests import PreparedPassage
from pruner_model.inference.results import PassageResult, PruneStats, SentenceResult, Span, join_spans
from pruner_model.inference.selection import Units, merge_spans


def flat_units(passages: list[PreparedPassage], scores: list[PairScores | None]):
    """The units of one query's passages, flattened in document order, as the arrays selection
    works on; also each unit's ``(starts, ends)`` in its passage. An empty passage has no scores."""
    parts, offset = [], 0
    relevance = np.zeros(len(passages))
    for pi, (p, sc) in enumerate(zip(passages, scores)):
        if sc is None:
            continue
        relevance[pi] = sc.relevance
        n = len(p.units)
        heading = [-1 if u.heading is None else offset + u.heading for u in p.units]
        parts.append(
            (sc.scores[:n], sc.tokens[:n], np.full(n, pi), [u.paragraph for u in p.units], heading, p)
        )
        offset += n

    def cat(k, dtype):
        return (
            np.concatenate([np.asarray(part[k], dtype=dtype) for part in parts])
            if parts
            else np.zeros(0, dtype)
        )

    units = Units(
        scores=cat(0, np.float64),
        passage=cat(2, np.int64),
        paragraph=cat(3, np.int64),
        heading=cat(4, np.int64),
        tokens=cat(1, np.int64),
        texts=[u.text_of(p.text) for *_, p in parts for u in p.units],
        relevance=relevance,
    )
    starts = np.array([u.start for *_, p in parts for u in p.units], dtype=np.int64)
    ends = np.array([u.end for *_, p in parts for u in p.units], dtype=np.int64)
    return units, starts, ends


def passage_result(
    p: PreparedPassage, units: Units, keep, starts, ends, pi: int, tiers=None
) -> PassageResult:
    """Passage ``pi``'s typed result: its kept spans (merged), text and every unit's decision."""
    sel = units.passage == pi
    spans = merge_spans(starts[sel], ends[sel], units.scores[sel], keep[sel])
    tier = tiers[sel] if tiers is not None else [None] * int(sel.sum())
    sentences = tuple(
        SentenceResult(k, u.start, u.end, float(s), bool(kp), u.kind, int(t), tr)
        for k, (u, s, kp, t, tr) in enumerate(
            zip(p.units, units.scores[sel], keep[sel], units.tokens[sel], tier)
        )
    )
    return PassageResult(
        id=p.id,
        title=p.title,
        text=join_spans(p.text, spans),
        spans=tuple(Span(*s) for s in spans),
        sentences=sentences,
        relevance=float(units.relevance[pi]),
        original_length=len(p.text),
        source_text=p.text,
    )


def prune_stats(
    units: Units, keep, removed: int, confidence: float, uncertain: bool, params, unfamiliar: bool = False
) -> PruneStats:
    """A request's counts: tokens and sentences in and out, duplicates, confidence, savings."""
    tokens_in = int(units.tokens.sum())
    tokens_out = int(units.tokens[keep].sum())
    price = params.price_per_million_tokens
    return PruneStats(
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        compression=1.0 - tokens_out / tokens_in if tokens_in else 0.0,
        sentences_in=len(units),
        sentences_out=int(keep.sum()),
        duplicates_removed=removed,
        encoder_seconds=0.0,
        postprocess_seconds=0.0,
        confidence=confidence,
        uncertain=uncertain,
        tokens_saved=tokens_in - tokens_out,
        cost_saved=None if price is None else (tokens_in - tokens_out) / 1e6 * price,
        unfamiliar=unfamiliar,
    )


def weighted_pairs(
    pairs: list[PairScores | None], exponent: float, contrast: float
) -> list[PairScores | None]:
    """One request's pairs (None: a passage with no units) with sentence scores weighted by
    passage relevance when the checkpoint has a relevance ``exponent``, the relevance first set
    against the request's best passage by ``contrast`` (core/score_rules.py). New objects: a pair
    shared by several requests is weighted within each."""
    live = [p for p in pairs if p is not None]
    if not exponent or not live:
        return pairs
    rel = iter(contrasted_relevance(np.array([p.relevance for p in live]), contrast))
    return [
        None if p is None else replace(p, scores=relevance_weighted(p.scores, next(rel), exponent))
        for p in pairs
    ]
