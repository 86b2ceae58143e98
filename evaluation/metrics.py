"""Pruning metrics over scored groups (pure numpy, shared by training, calibration and evaluation).

A *group* is one query with its passages. Each passage contributes its units' scores, labels
(does the unit overlap a relevant span) and token counts. The strict metric a pruner lives by is
**evidence preserved**: the share of queries (with some relevant span) whose every relevant unit
is kept.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from pruner_model.core.score_rules import contrasted_relevance, relative_scores, relevance_weighted


@dataclass
class ScoredGroup:
    """The units of all passages of one query, flattened."""

    scores: np.ndarray  # [n] sentence scores
    labels: np.ndarray  # [n] bool, unit overlaps a relevant span
    tokens: np.ndarray  # [n] tokens per unit
    words: np.ndarray | None = (
        None  # [n] words per unit (pruner_model.evaluation.groups.words; model-independent)
    )
    relevance: np.ndarray | None = None  # [n] relevance probability of each unit's passage

    @property
    def has_evidence(self) -> bool:
        return bool(self.labels.any())

    @property
    def critical(self) -> float:
        """The highest threshold that still keeps every relevant unit (-inf without evidence)."""
        return float(self.scores[self.labels].min()) if self.labels.any() else float("-inf")


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve by the rank-sum formula (ties get average ranks)."""
    scores, labels = np.asarray(scores, float), np.asarray(labels, bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _fbeta(p: float, r: float, beta: float) -> float:
    b2 = beta * beta
    return (1 + b2) * p * r / (b2 * p + r) if (p + r) > 0 else 0.0


def metrics_at(
    groups: list[ScoredGroup], threshold: float, keep_masks: list[np.ndarray] | None = None
) -> dict:
    """Metrics when units scoring ``>= threshold`` are kept (or given ``keep_masks``)."""
    tp = fp = fn = 0
    tok_in = tok_out = word_in = word_out = 0
    neg_in = neg_out = 0
    preserved = with_evidence = 0
    rel_total = rel_kept = 0
    for k, g in enumerate(groups):
        keep = keep_masks[k] if keep_masks is not None else g.scores >= threshold
        tp += int((keep & g.labels).sum())
        fp += int((keep & ~g.labels).sum())
        fn += int((~keep & g.labels).sum())
        tok_in += int(g.tokens.sum())
        tok_out += int(g.tokens[keep].sum())
        if g.words is not None:
            word_in += int(g.words.sum())
            word_out += int(g.words[keep].sum())
        if g.has_evidence:
            with_evidence += 1
            preserved += int(keep[g.labels].all())
            rel_total += int(g.labels.sum())
            rel_kept += int((keep & g.labels).sum())
        else:
            neg_in += int(g.tokens.sum())
            neg_out += int(g.tokens[keep].sum())
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return {
        "threshold": float(threshold),
        "evidence_preserved": preserved / with_evidence if with_evidence else float("nan"),
        "relevant_sentences_kept": rel_kept / rel_total if rel_total else float("nan"),
        "compression": 1 - tok_out / tok_in if tok_in else 0.0,
        "word_compression": 1 - word_out / word_in if word_in else float("nan"),
        "precision": p,
        "recall": r,
        "f1": _fbeta(p, r, 1.0),
        "f2": _fbeta(p, r, 2.0),
        "negative_tokens_kept": neg_out / neg_in if neg_in else float("nan"),
        "groups": len(groups),
        "queries_with_evidence": with_evidence,
        "queries_preserved": preserved,
    }


def relative_groups(groups: list[ScoredGroup], floor: float | None) -> list[ScoredGroup]:
    """:func:`relative_scores` applied to each group (one group = one request)."""
    if floor is None:
        return groups
    return [dataclasses.replace(g, scores=relative_scores(g.scores, floor)) for g in groups]


def weighted_groups(groups: list[ScoredGroup], exponent: float, contrast: float = 0.0) -> list[ScoredGroup]:
    """:func:`relevance_weighted` applied to each group (groups must carry ``relevance``), the
    relevance first set against the group's best passage when ``contrast`` > 0
    (:func:`contrasted_relevance`: a group is one request)."""
    if exponent == 0:
        return groups
    if any(g.relevance is None for g in groups):
        raise ValueError("a relevance exponent needs groups scored with passage relevance")
    return [
        dataclasses.replace(
            g, scores=relevance_weighted(g.scores, contrasted_relevance(g.relevance, contrast), exponent)
        )
        for g in groups
    ]


def _sweep_thresholds(groups: list[ScoredGroup]) -> np.ndarray:
    """101 points on [0, 1] plus every evidence group's critical score."""
    crit = [g.critical for g in groups if g.has_evidence]
    return np.unique(np.clip(np.concatenate([np.linspace(0, 1, 101), crit]), 0, 1))


def _suffix_sums(x: np.ndarray) -> np.ndarray:
    """``out[i] = x[i:].sum()`` for ``i`` in ``0..len(x)`` (the last is 0)."""
    return np.concatenate([np.cumsum(x[::-1])[::-1], [0]])


def sweep(groups: list[ScoredGroup], thresholds: np.ndarray | None = None) -> list[dict]:
    """Metrics at each threshold (default: 101 points on [0, 1] plus every group's critical)."""
    if thresholds is None:
        thresholds = _sweep_thresholds(groups)
    return [metrics_at(groups, float(t)) for t in thresholds]


def best_compression_at(curve: list[dict], target: float) -> dict | None:
    """The point of a sweep with the highest compression whose evidence is ``>= target``."""
    ok = [pt for pt in curve if pt["evidence_preserved"] >= target - 1e-12]
    return max(ok, key=lambda pt: pt["compression"]) if ok else None
