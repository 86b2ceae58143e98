"""Calibrating a checkpoint's operating point on scored groups: the threshold that keeps a target
share of the queries' evidence, and the relative floor and relevance exponent whose such threshold
compresses most (cross-validated), optionally on several slices at once."""

from __future__ import annotations

import numpy as np
from pruner_model.evaluation.metrics import ScoredGroup, metrics_at, relative_groups, weighted_groups
from pruner_model.evaluation.statistics import required_kept


def calibrate_threshold(groups: list[ScoredGroup], target: float, confidence: float | None = None) -> float:
    """The highest threshold whose evidence preserved is ``>= target`` (so: most compression);
    with ``confidence``, the highest that keeps :func:`required_kept` of the evidence groups, so
    that new queries keep ``>= target`` with that confidence.

    Evidence preserved at threshold t is the share of evidence groups whose critical score
    (lowest relevant-unit score) is ``>= t``; it only falls as t rises, so the answer is an
    order statistic of the critical scores.
    """
    crit = np.sort([g.critical for g in groups if g.has_evidence])[::-1]
    if not len(crit):
        return 0.5
    need = required_kept(len(crit), float(target), confidence)
    return float(np.clip(crit[need - 1], 0.0, 1.0))


CHOOSE_BY = ("threshold", "curve")


def curve_compression(
    slices: list[list[ScoredGroup]], target: float, confidence: float | None = None
) -> float | None:
    """The mean over slices with evidence of each slice's compression at its own threshold for
    ``target`` (:func:`calibrate_threshold`); None when no slice has evidence."""
    out = [
        metrics_at(gs, calibrate_threshold(gs, target, confidence))["compression"]
        for gs in slices
        if any(g.has_evidence for g in gs)
    ]
    return float(np.mean(out)) if out else None


def slices_threshold(
    slices: list[list[ScoredGroup]],
    target: float,
    confidence: float | None = None,
    tolerance: float = 0.0,
) -> float:
    """The highest threshold whose evidence preserved is ``>= target`` on every slice: the lowest
    of the slices' own (:func:`calibrate_threshold`, with ``confidence`` for each slice's size);
    slices without evidence set none.

    With ``tolerance`` each slice need only keep ``target - tolerance``, while all slices pooled
    keep ``target``: the slice whose answers are hardest to find no longer sets the threshold for
    all the others by itself.
    """
    live = [gs for gs in slices if any(g.has_evidence for g in gs)]
    if not live:
        return calibrate_threshold([], target)
    own = [calibrate_threshold(gs, target - tolerance, confidence) for gs in live]
    if tolerance > 0:
        own.append(calibrate_threshold([g for gs in live for g in gs], target, confidence))
    return min(own)


def cross_validate(
    groups: list[ScoredGroup] | list[list[ScoredGroup]],
    target: float,
    floor: float | None = None,
    folds: int = 5,
    seed: int = 0,
    confidence: float | None = None,
    tolerance: float = 0.0,
) -> dict:
    """Evidence preserved and compression of a calibrated threshold on groups it was not calibrated
    on: ``folds``-fold cross-validation (threshold calibrated on the other folds, measured on the
    held-out one, pooled over folds).

    ``groups`` may be a list of slices (lists of groups): each is split into folds, the threshold
    is :func:`slices_threshold` of the slices' other folds, and the numbers pool every slice.

    In-sample, every candidate hits the target exactly and the one whose scores fit these groups
    best wins; held-out numbers say which candidate carries over to new queries.
    """
    slices = groups if groups and isinstance(groups[0], list) else [groups]
    if folds < 2 or min(len(gs) for gs in slices) < folds:
        raise ValueError(
            f"cross-validation needs at least 2 folds and as many groups per slice, got {folds} / "
            f"{min(len(gs) for gs in slices)}"
        )
    rng = np.random.default_rng(seed)
    rel = [relative_groups(gs, floor) for gs in slices]
    assign = [rng.permutation(len(gs)) % folds for gs in rel]
    pooled: list[ScoredGroup] = []
    kept_masks: list[np.ndarray] = []
    for f in range(folds):
        rest = [[g for g, a in zip(gs, asg) if a != f] for gs, asg in zip(rel, assign)]
        t = slices_threshold(rest, target, confidence, tolerance)
        for gs, asg in zip(rel, assign):
            for i in np.flatnonzero(asg == f):
                pooled.append(gs[i])
                kept_masks.append(gs[i].scores >= t)
    m = metrics_at(pooled, float("nan"), kept_masks)
    return {"evidence_preserved": m["evidence_preserved"], "compression": m["compression"], "folds": folds}


def _candidate(rel: dict, target: float, confidence, tolerance: float, folds: int, choose_by: str):
    """One (exponent, floor) candidate on its slices' scores ``rel``: its threshold (meeting the
    target on every slice), compression, each slice at its own threshold (``choose_by="curve"``)
    and, with ``folds``, its cross-validated numbers; also its metrics at that threshold."""
    t = slices_threshold(list(rel.values()), target, confidence, tolerance)
    m = metrics_at([g for gs in rel.values() for g in gs], t)
    row = {"threshold": t, "compression": m["compression"]}
    if choose_by == "curve":
        row["curve_compression"] = curve_compression(list(rel.values()), target, confidence)
    if folds:  # rel is already relative to the candidate's floor
        cv = cross_validate(
            list(rel.values()), target, None, folds, confidence=confidence, tolerance=tolerance
        )
        row.update(cv_evidence_preserved=cv["evidence_preserved"], cv_compression=cv["compression"])
    return row, m


def _check_candidates(choose_by: str, floors, exponents) -> None:
    if choose_by not in CHOOSE_BY:
        raise ValueError(f"choose_by must be one of {', '.join(CHOOSE_BY)}, got {choose_by!r}")
    if not floors:
        raise ValueError("floors must name at least one candidate (None = absolute scores)")
    if not exponents:
        raise ValueError("exponents must name at least one candidate (0 = no relevance weighting)")


def _score_of(row: dict, choose_by: str) -> float:
    """What candidates are ranked by: each slice at its own threshold (``curve``; no slice with
    evidence: every candidate ties, the first wins), else the (cross-validated) compression."""
    if choose_by == "curve":
        return row["curve_compression"] if row["curve_compression"] is not None else -1.0
    return row.get("cv_compression", row["compression"])


def calibrate_operating_point(
    groups: list[ScoredGroup] | dict[str, list[ScoredGroup]],
    target: float,
    floors: list[float | None],
    folds: int = 0,
    exponents: list[float] | tuple[float, ...] = (0.0,),
    confidence: float | None = None,
    tolerance: float = 0.0,
    contrast: float = 0.0,
    choose_by: str = "threshold",
) -> tuple[float | None, float, dict]:
    """The ``(relative_floor, threshold)`` pair, among ``floors`` (None = absolute scores), with the
    highest compression at evidence preserved ``>= target``; also its metrics on ``groups``.

    With ``folds >= 2`` (more than one candidate, at least ``folds`` groups) the floor is the one
    with the highest cross-validated compression (:func:`cross_validate`); the threshold is then
    calibrated on all ``groups``. Every candidate's numbers: ``"candidates"``; ties: the earlier.

    ``exponents`` are relevance exponents (:func:`relevance_weighted`) tried with every floor; the
    chosen one is ``metrics["relevance_exponent"]``; ``contrast`` sets each group's relevance
    against its best passage first (:func:`contrasted_relevance`).

    ``confidence`` calibrates every threshold so that new queries keep ``>= target`` with that
    confidence, given how many queries with evidence each slice has (:func:`required_kept`).

    ``groups`` may be slices (``{name: groups}``, e.g. the calibration groups and shifted copies
    of them): each candidate's threshold is then the one that meets the target on every slice
    (:func:`slices_threshold`), candidates are compared by the compression of all slices' groups
    at that threshold, and ``metrics["slice_thresholds"]`` holds the chosen candidate's per slice.
    ``tolerance``: each slice need only keep ``target - tolerance`` (:func:`slices_threshold`).

    ``choose_by="curve"`` ranks the candidates instead by how much each slice compresses at its
    own threshold for ``target`` (the mean over slices with evidence, in-sample): the rule that
    orders sentences best within each kind of text, which is what a threshold calibrated on a
    user's own data, or a named operating point, gets; the threshold is still the one that meets
    the target on every slice. ``"threshold"`` (the default) ranks them by the compression at that
    one threshold.
    """
    _check_candidates(choose_by, floors, exponents)
    named = groups if isinstance(groups, dict) else {"all": groups}
    use_cv = (
        folds >= 2 and len(floors) * len(exponents) > 1 and min(len(gs) for gs in named.values()) >= folds
    )
    best, table = None, []
    for exponent in exponents:
        weighted = {k: weighted_groups(gs, exponent, contrast) for k, gs in named.items()}
        for floor in floors:
            rel = {k: relative_groups(gs, floor) for k, gs in weighted.items()}
            row, m = _candidate(rel, target, confidence, tolerance, folds if use_cv else 0, choose_by)
            row = {"relevance_exponent": exponent, "relative_floor": floor, **row}
            table.append(row)
            t, score = row["threshold"], _score_of(row, choose_by)
            if best is None or score > best[0] + 1e-12:
                per = {k: calibrate_threshold(gs, target, confidence) for k, gs in rel.items()}
                best = (score, exponent, floor, t, m, per)
    _, exponent, floor, t, m, per = best
    out = {**m, "relevance_exponent": exponent, "candidates": table}
    if isinstance(groups, dict):
        out["slice_thresholds"] = per
    return floor, t, out
