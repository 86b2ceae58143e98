"""Selection steps over the units of one query's passages, each a small function on arrays.

All steps take and return a boolean ``keep`` mask over the units of every passage of a query
(flattened in document order) so they compose freely; :func:`select` chains them in the order
the pruner applies them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from pruner_model.metrics import check_relative_floor, relative_scores

_WS = re.compile(r"\s+")


@dataclass
class Units:
    """The flattened units of one query's passages."""

    scores: np.ndarray  # [n] float sentence scores
    passage: np.ndarray  # [n] passage index of each unit
    paragraph: np.ndarray  # [n] paragraph number inside its passage
    heading: np.ndarray  # [n] global index of the unit's section heading, -1 if none
    tokens: np.ndarray  # [n] tokens of each unit
    texts: list[str]  # [n] unit texts (for duplicate detection)
    relevance: np.ndarray  # [n_passages] passage relevance probabilities

    def __len__(self) -> int:
        return len(self.scores)


def apply_threshold(units: Units, threshold: float, relative_floor: float | None = None) -> np.ndarray:
    """Units whose score (relative to the request's best, see ``relative_scores``) is ``>= threshold``."""
    return relative_scores(units.scores, relative_floor) >= threshold


def gate_passages(units: Units, keep: np.ndarray, min_relevance: float | None) -> np.ndarray:
    """Drop every unit of a passage whose relevance probability is under ``min_relevance``."""
    if min_relevance is None or not len(units):
        return keep
    return keep & (units.relevance[units.passage] >= min_relevance)


def keep_top(units: Units, keep: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` best-scored units survive whatever the other steps decided."""
    if k <= 0 or not len(units):
        return keep
    keep = keep.copy()
    keep[np.argsort(-units.scores, kind="stable")[:k]] = True
    return keep


def expand_neighbors(units: Units, keep: np.ndarray, n: int) -> np.ndarray:
    """Also keep up to ``n`` units on each side of a kept unit, inside the same paragraph."""
    if n <= 0 or not len(units):
        return keep
    group = units.passage.astype(np.int64) * (1 << 32) + units.paragraph
    out = keep.copy()
    for d in range(1, n + 1):
        same = group[d:] == group[:-d]
        out[d:] |= keep[:-d] & same  # the unit d after a kept one
        out[:-d] |= keep[d:] & same  # the unit d before a kept one
    return out


def keep_headings(units: Units, keep: np.ndarray) -> np.ndarray:
    """A kept unit keeps the heading of its section (and that heading its own, recursively)."""
    out = keep.copy()
    frontier = np.flatnonzero(out)
    while len(frontier):
        parents = units.heading[frontier]
        parents = parents[(parents >= 0) & ~out[np.clip(parents, 0, None)]]
        parents = np.unique(parents)
        out[parents] = True
        frontier = parents
    return out


def normalize(text: str) -> str:
    return _WS.sub(" ", text).strip().lower()


def drop_duplicates(units: Units, keep: np.ndarray) -> tuple[np.ndarray, int]:
    """Kept units whose whitespace-normalized text was already kept are dropped (first wins)."""
    out = keep.copy()
    seen: set[str] = set()
    removed = 0
    for i in np.flatnonzero(keep):
        key = normalize(units.texts[i])
        if key in seen:
            out[i] = False
            removed += 1
        else:
            seen.add(key)
    return out, removed


def pack_budget(
    units: Units, keep: np.ndarray, budget: int | None, per_passage: int | None = None
) -> np.ndarray:
    """Greedy packing: kept units by descending score while they fit ``budget`` tokens in all
    and ``per_passage`` tokens in each passage. Units that do not fit are skipped, smaller
    ones after them may still fit. Document order is untouched (it is a mask)."""
    if budget is None and per_passage is None:
        return keep
    out = np.zeros_like(keep)
    total = 0
    used: dict[int, int] = {}
    idx = np.flatnonzero(keep)
    for i in idx[np.argsort(-units.scores[idx], kind="stable")]:
        t = int(units.tokens[i])
        p = int(units.passage[i])
        if budget is not None and total + t > budget:
            continue
        if per_passage is not None and used.get(p, 0) + t > per_passage:
            continue
        out[i] = True
        total += t
        used[p] = used.get(p, 0) + t
    return out


@dataclass(frozen=True)
class SelectionParams:
    threshold: float
    relative_floor: float | None = None  # see pruner_model.metrics.relative_scores
    token_budget: int | None = None
    per_passage_budget: int | None = None
    neighbors: int = 0
    keep_top: int = 0
    min_relevance: float | None = None
    keep_headings: bool = True
    dedup: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        check_relative_floor(self.relative_floor)
        for name in ("token_budget", "per_passage_budget"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"{name} must be >= 0, got {v}")
        if self.neighbors < 0 or self.keep_top < 0:
            raise ValueError("neighbors and keep_top must be >= 0")


def select(units: Units, params: SelectionParams) -> tuple[np.ndarray, int]:
    """Threshold → passage gate → keep_top → neighbours → headings → dedup → budget.

    Returns the keep mask and the number of duplicate units removed.
    """
    keep = apply_threshold(units, params.threshold, params.relative_floor)
    keep = gate_passages(units, keep, params.min_relevance)
    keep = keep_top(units, keep, params.keep_top)
    keep = expand_neighbors(units, keep, params.neighbors)
    if params.keep_headings:
        keep = keep_headings(units, keep)
    removed = 0
    if params.dedup:
        keep, removed = drop_duplicates(units, keep)
    keep = pack_budget(units, keep, params.token_budget, params.per_passage_budget)
    return keep, removed


def merge_spans(starts: np.ndarray, ends: np.ndarray, scores: np.ndarray, keep: np.ndarray):
    """Adjacent kept units of one passage merged into ``(start, end, score)`` spans."""
    spans = []
    idx = np.flatnonzero(keep)
    if not len(idx):
        return spans
    breaks = np.flatnonzero(np.diff(idx) > 1) + 1
    for run in np.split(idx, breaks):
        spans.append((int(starts[run[0]]), int(ends[run[-1]]), float(scores[run].max())))
    return spans
