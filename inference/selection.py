"""Selection steps over the units of one query's passages, each a small function on arrays.

All steps take and return a boolean ``keep`` mask over the units of every passage of a query
(flattened in document order) so they compose freely; :func:`select` chains them in the order
the pruner applies them.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np
from pruner_model.core.score_rules import relative_scores
from pruner_model.inference import pattern_lane
from pruner_model.inference.settings import CHECKPOINT, MUST_KEEP_SECONDS, SelectionParams, compile_pattern

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


def continue_answers(units: Units, keep: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """Answers that run over several sentences: a unit of ``reach`` next to a kept one, in the
    same paragraph, is kept too, and so on along the run (``reach``: the units scoring at least
    ``continuation`` times the threshold; a run stays in its passage, which the gate let through).
    ``keep`` and ``reach`` may carry a second axis: several thresholds' masks at once."""
    if not len(units) or not (reach & ~keep).any():
        return keep
    group = units.passage.astype(np.int64) * (1 << 32) + units.paragraph
    same = (group[1:] == group[:-1]).reshape(-1, *([1] * (keep.ndim - 1)))
    out = keep.copy()
    while True:
        beside = np.zeros_like(out)
        beside[1:] |= out[:-1] & same
        beside[:-1] |= out[1:] & same
        grown = out | (beside & reach)
        if (grown == out).all():
            return out
        out = grown


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
    n = min(n, len(units))  # farther than the whole query's units changes nothing
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
    units: Units,
    keep: np.ndarray,
    budget: int | None,
    per_passage: int | None = None,
    priority: np.ndarray | None = None,
) -> np.ndarray:
    """Greedy packing: kept units by descending score (``priority`` units first) while they fit
    ``budget`` tokens in all and ``per_passage`` tokens in each passage. Units that do not fit
    are skipped, smaller ones after them may still fit. Document order is untouched (a mask)."""
    if budget is None and per_passage is None:
        return keep
    out = np.zeros_like(keep)
    total = 0
    used: dict[int, int] = {}
    idx = np.flatnonzero(keep)
    first = np.zeros(len(idx)) if priority is None else -priority[idx].astype(np.float64)
    for i in idx[np.lexsort((-units.scores[idx], first))]:
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


def must_keep(
    units: Units, keep: np.ndarray, patterns: tuple[str, ...], seconds: float = MUST_KEEP_SECONDS
) -> np.ndarray:
    """Units whose text matches one of ``patterns`` (``re.search`` semantics) are kept.

    Raises:
        ValueError: the patterns ran over ``seconds`` on these units together (catastrophic
            backtracking, e.g. ``(a+)+$``); nothing is left running.
    """
    if not patterns or not len(units):
        return keep
    return keep | must_keep_hits(units.texts, patterns, time.monotonic() + seconds, seconds)


def must_keep_hits(
    texts: list[str], patterns: tuple[str, ...], deadline: float, seconds: float = MUST_KEEP_SECONDS
) -> np.ndarray:
    """Which ``texts`` match one of ``patterns``, all matching done by ``deadline`` (a
    ``time.monotonic()`` instant shared by every query of one request, ``seconds`` after it
    started; ``seconds`` also names the budget in the error). After the request's first
    :data:`~pruner_model.inference.pattern_lane.QUICK_SECONDS`, matching goes on at the lowest CPU
    priority (:mod:`pruner_model.inference.pattern_lane`).

    Raises:
        ValueError: the patterns ran past the deadline (catastrophic backtracking?).
    """
    compiled = [compile_pattern(p) for p in patterns]
    quick_until = deadline - seconds + pattern_lane.QUICK_SECONDS  # then on the low-priority lane
    hits = np.zeros(len(texts), dtype=bool)
    for c, pattern in zip(compiled, patterns):
        for i, text in enumerate(texts):
            if hits[i]:
                continue
            try:
                hits[i] = pattern_lane.search(c, text, deadline, quick_until)
            except TimeoutError:
                raise ValueError(
                    f"must_keep pattern {pattern!r} ran over {seconds:g} s on this text "
                    "(catastrophic backtracking?): simplify it"
                ) from None
    return hits


def uncertainty(units: Units, below: float | str | None) -> tuple[float, bool]:
    """``(confidence, uncertain)`` of one query: its best unit score, and whether that is under
    ``below`` (no sentence stands out, so the answer may be among the dropped ones)."""
    confidence = float(units.scores.max()) if len(units) else 0.0
    return confidence, below not in (None, CHECKPOINT) and confidence < float(below)


def select(units: Units, params: SelectionParams, forced: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Threshold → passage gate → continuation → must_keep → keep_top → neighbours → headings →
    dedup → budget;
    with ``if_uncertain="keep_all"``, an uncertain query (see :func:`uncertainty`) keeps everything
    that fits the token budgets.

    ``params`` needs a threshold (``ContextPruner`` fills in the checkpoint's); a relative floor
    left at ``"checkpoint"`` means absolute scores here, where there is no checkpoint. Returns the
    keep mask and the number of duplicate units removed. Budget packing takes ``must_keep`` units
    first, then the others by score. ``forced``: the units ``must_keep`` matched, when the request
    was matched before it was scored.
    """
    if params.threshold is None:
        raise ValueError("select() needs a threshold (ContextPruner fills in the checkpoint's)")
    floor = None if params.relative_floor == CHECKPOINT else params.relative_floor
    if params.if_uncertain == "keep_all" and uncertainty(units, params.uncertain_below)[1]:
        # everything, within the budgets: a budget bounds the output in every mode
        everything = np.ones(len(units), dtype=bool)
        return pack_budget(units, everything, params.token_budget, params.per_passage_budget), 0
    keep = apply_threshold(units, params.threshold, floor)
    keep = gate_passages(units, keep, params.min_relevance)
    if params.continuation is not None:
        reach = apply_threshold(units, params.continuation * params.threshold, floor)
        keep = continue_answers(units, keep, reach)
    if forced is None:  # else matched when the request was prepared (ContextPruner.prepare)
        forced = must_keep(units, np.zeros(len(units), dtype=bool), params.must_keep)
    keep = keep | forced
    keep = keep_top(units, keep, params.keep_top)
    keep = expand_neighbors(units, keep, params.neighbors)
    if params.keep_headings:
        keep = keep_headings(units, keep)
    removed = 0
    if params.dedup:
        keep, removed = drop_duplicates(units, keep)
    keep = pack_budget(units, keep, params.token_budget, params.per_passage_budget, priority=forced)
    return keep, removed


def middle_tier(units: Units, keep: np.ndarray, params: SelectionParams) -> np.ndarray:
    """The units summarized instead of dropped: those :func:`select` dropped that score at least
    ``params.summary_threshold`` (relative like the threshold), in passages the relevance gate
    lets through, not duplicates of a kept or earlier one, packed by score into what the token
    budgets leave after the kept units, each counted at its full length (so the output stays
    within the budget even where a summary falls back to the verbatim chunk)."""
    if params.summary_threshold is None or not len(units) or keep.all():
        return np.zeros(len(units), dtype=bool)
    floor = None if params.relative_floor == CHECKPOINT else params.relative_floor
    middle = apply_threshold(units, params.summary_threshold, floor) & ~keep
    middle = gate_passages(units, middle, params.min_relevance)
    if params.dedup:
        seen = {normalize(units.texts[i]) for i in np.flatnonzero(keep)}
        for i in np.flatnonzero(middle):
            key = normalize(units.texts[i])
            middle[i] = key not in seen
            seen.add(key)
    # the kept units go first and all fit (select packed them under the same budgets); the middle
    # ones then take what is left, by score
    packed = pack_budget(units, keep | middle, params.token_budget, params.per_passage_budget, priority=keep)
    return packed & ~keep


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
