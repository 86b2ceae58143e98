"""Pruning metrics over scored dev groups (pure numpy, shared by training and evaluation).

A *group* is one query with its passages. Each passage contributes its units' scores, labels
(does the unit overlap a relevant span) and token counts. The strict metric a pruner lives by is
**evidence preserved**: the share of queries (with some relevant span) whose every relevant unit
is kept.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np


@dataclass
class ScoredGroup:
    """The units of all passages of one query, flattened."""

    scores: np.ndarray  # [n] sentence scores
    labels: np.ndarray  # [n] bool, unit overlaps a relevant span
    tokens: np.ndarray  # [n] tokens per unit
    words: np.ndarray | None = None  # [n] words per unit (pruner_model.groups.words; model-independent)
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


def check_relative_floor(floor: float | None) -> None:
    """A relative floor is None (absolute scores) or in (0, 1]; anything else is a ValueError."""
    if floor is not None and not 0.0 < floor <= 1.0:
        raise ValueError(f"relative_floor must be None or in (0, 1], got {floor}")


def relative_scores(scores: np.ndarray, floor: float | None) -> np.ndarray:
    """The scores a threshold is compared with: ``scores / max(floor, best score)`` over the units
    of one request (one query's passages), or the scores unchanged when ``floor`` is None.

    With a floor, a request whose best sentence scores high prunes its other sentences relative to
    that best one; a request whose best sentence is weak (under ``floor``) is thresholded as is,
    scaled by ``1 / floor``.

    >>> relative_scores(np.array([0.8, 0.2, 0.01]), 0.1).round(3).tolist()
    [1.0, 0.25, 0.012]
    >>> relative_scores(np.array([0.05, 0.01]), 0.1).round(3).tolist()
    [0.5, 0.1]
    """
    check_relative_floor(floor)
    scores = np.asarray(scores, dtype=np.float64)
    if floor is None or not len(scores):
        return scores
    return scores / max(floor, float(scores.max()))


def relative_groups(groups: list[ScoredGroup], floor: float | None) -> list[ScoredGroup]:
    """:func:`relative_scores` applied to each group (one group = one request)."""
    if floor is None:
        return groups
    return [dataclasses.replace(g, scores=relative_scores(g.scores, floor)) for g in groups]


def check_relevance_exponent(exponent: float) -> None:
    if isinstance(exponent, bool) or not isinstance(exponent, (int, float)) or not 0.0 <= exponent <= 4.0:
        raise ValueError(f"relevance_exponent must be a number in [0, 4], got {exponent!r}")


def relevance_weighted(scores: np.ndarray, relevance: np.ndarray | float, exponent: float) -> np.ndarray:
    """Sentence scores times their passage's relevance probability (per unit, or one for all) to
    the power ``exponent`` (0: the scores unchanged). The token head says which sentence of a passage answers; the
    relevance head says whether the passage does; a sentence of a passage the relevance head
    doubts needs a higher token score to be kept.

    >>> relevance_weighted(np.array([0.8, 0.4]), np.array([1.0, 0.25]), 0.5).tolist()
    [0.8, 0.2]
    """
    check_relevance_exponent(exponent)
    scores = np.asarray(scores, dtype=np.float64)
    if exponent == 0:
        return scores
    return scores * np.power(np.clip(np.asarray(relevance, dtype=np.float64), 0.0, 1.0), exponent)


def weighted_groups(groups: list[ScoredGroup], exponent: float) -> list[ScoredGroup]:
    """:func:`relevance_weighted` applied to each group (groups must carry ``relevance``)."""
    if exponent == 0:
        return groups
    if any(g.relevance is None for g in groups):
        raise ValueError("a relevance exponent needs groups scored with passage relevance")
    return [
        dataclasses.replace(g, scores=relevance_weighted(g.scores, g.relevance, exponent)) for g in groups
    ]


def check_confidence(confidence: float | None) -> None:
    """``confidence`` of :func:`required_kept`: None, or a number in [0.5, 1)."""
    if confidence is None:
        return
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence!r}")


@functools.lru_cache(maxsize=4096)
def required_kept(n: int, target: float, confidence: float | None = None) -> int:
    """How many of ``n`` calibration queries with evidence a calibrated threshold must keep.

    Without ``confidence``: ``ceil(target * n)``, the sample's share meets the target (about half
    the time, new queries then keep less). With ``confidence`` (in [0.5, 1)): the fewest ``k``
    for which an exact one-sided binomial (Clopper-Pearson) bound puts the share kept on new
    queries at or above ``target`` with that confidence, ``P(Binomial(n, target) >= k) <= 1 -
    confidence``; the headroom shrinks as ``n`` grows (about ``z * sqrt(target * (1 - target) /
    n)``). ``n`` when no ``k`` reaches the bound: the threshold then keeps every answer seen.
    """
    check_confidence(confidence)
    if n <= 0:
        return 0
    plain = min(max(int(np.ceil(target * n - 1e-9)), 1), n)
    if confidence is None or target >= 1.0:
        return plain
    at_least = np.cumsum(binomial_pmf(n, target)[::-1])[::-1]  # P(Binomial(n, target) >= k)
    ok = np.flatnonzero(at_least <= 1.0 - confidence + 1e-12)
    return int(max(plain, ok[0] if len(ok) else n))


def binomial_pmf(n: int, p: float) -> np.ndarray:
    """``P(Binomial(n, p) = k)`` for ``k = 0..n``, from log factorials (exact for any ``n``)."""
    k = np.arange(n + 1)
    if p <= 0.0 or p >= 1.0:
        return (k == (0 if p <= 0.0 else n)).astype(np.float64)
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])
    return np.exp(log_fact[n] - log_fact[k] - log_fact[n - k] + k * np.log(p) + (n - k) * np.log1p(-p))


def _increasing_root(f, lo: float = 0.0, hi: float = 1.0, steps: int = 60) -> float:
    """The ``p`` in ``[lo, hi]`` where the increasing function ``f`` crosses zero (bisection)."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def kept_interval(kept: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact two-sided (Clopper-Pearson) interval for the share of *new* queries a threshold keeps,
    from ``kept`` of ``n`` queries with evidence it kept on a held-out sample.

    A report of 97 queries that keeps 88 (0.907) has the interval (0.831, 0.957): that sample
    cannot tell a threshold that keeps 0.95 from one that keeps 0.85.

    >>> [round(x, 3) for x in kept_interval(88, 97)]
    [0.831, 0.957]
    """
    if not 0 <= kept <= n or n <= 0:
        raise ValueError(f"kept must be in [0, n] with n >= 1, got kept={kept}, n={n}")
    tail = (1.0 - level) / 2
    lo = 0.0 if kept == 0 else _increasing_root(lambda p: binomial_pmf(n, p)[kept:].sum() - tail)
    hi = 1.0 if kept == n else _increasing_root(lambda p: tail - binomial_pmf(n, p)[: kept + 1].sum())
    return lo, hi


def promise_check(kept: int, n: int, target: float, level: float = 0.95) -> dict:
    """Whether keeping ``kept`` of ``n`` held-out queries is consistent with a promise of ``target``.

    Returns ``target``, ``kept``, ``queries``, ``share``, the ``level`` ``interval``
    (:func:`kept_interval`), ``p_under_target`` (the chance that a threshold truly keeping
    ``target`` keeps this few or fewer: ``P(Binomial(n, target) <= kept)``) and ``verdict``:
    ``"met"`` (the share is at or above the target), ``"within chance"`` (under it, but the
    interval reaches it: the sample is too small to tell) or ``"missed"`` (the whole interval lies
    under it: the promise does not hold on such queries).

    >>> promise_check(88, 97, 0.95)["verdict"], promise_check(430, 478, 0.95)["verdict"]
    ('within chance', 'missed')
    """
    lo, hi = kept_interval(kept, n, level)
    share = kept / n
    verdict = "met" if share >= target else ("missed" if hi < target else "within chance")
    return {
        "target": float(target),
        "kept": int(kept),
        "queries": int(n),
        "share": share,
        "interval": [lo, hi],
        "level": level,
        "p_under_target": float(binomial_pmf(n, target)[: kept + 1].sum()),
        "verdict": verdict,
    }


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


def slices_threshold(
    slices: list[list[ScoredGroup]], target: float, confidence: float | None = None
) -> float:
    """The highest threshold whose evidence preserved is ``>= target`` on every slice: the lowest
    of the slices' own (:func:`calibrate_threshold`, with ``confidence`` for each slice's size);
    slices without evidence set none."""
    own = [calibrate_threshold(gs, target, confidence) for gs in slices if any(g.has_evidence for g in gs)]
    return min(own) if own else calibrate_threshold([], target)


def cross_validate(
    groups: list[ScoredGroup] | list[list[ScoredGroup]],
    target: float,
    floor: float | None = None,
    folds: int = 5,
    seed: int = 0,
    confidence: float | None = None,
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
        t = slices_threshold(rest, target, confidence)
        for gs, asg in zip(rel, assign):
            for i in np.flatnonzero(asg == f):
                pooled.append(gs[i])
                kept_masks.append(gs[i].scores >= t)
    m = metrics_at(pooled, float("nan"), kept_masks)
    return {"evidence_preserved": m["evidence_preserved"], "compression": m["compression"], "folds": folds}


def calibrate_operating_point(
    groups: list[ScoredGroup] | dict[str, list[ScoredGroup]],
    target: float,
    floors: list[float | None],
    folds: int = 0,
    exponents: list[float] | tuple[float, ...] = (0.0,),
    confidence: float | None = None,
) -> tuple[float | None, float, dict]:
    """The ``(relative_floor, threshold)`` pair, among ``floors`` (None = absolute scores), with the
    highest compression at evidence preserved ``>= target``; also its metrics on ``groups``.

    With ``folds >= 2`` (more than one candidate, at least ``folds`` groups) the floor is the one
    with the highest cross-validated compression (:func:`cross_validate`), not the highest in-sample one; the
    threshold is then calibrated on all ``groups``. The metrics carry every candidate's numbers
    under ``"candidates"``. Ties go to the earlier candidate.

    ``exponents`` are relevance exponents (:func:`relevance_weighted`) tried with every floor; the
    chosen one is ``metrics["relevance_exponent"]``.

    ``confidence`` calibrates every threshold so that new queries keep ``>= target`` with that
    confidence, given how many queries with evidence each slice has (:func:`required_kept`).

    ``groups`` may be slices (``{name: groups}``, e.g. the calibration groups and shifted copies
    of them): each candidate's threshold is then the one that meets the target on every slice
    (:func:`slices_threshold`), candidates are compared by the compression of all slices' groups
    at that threshold, and ``metrics["slice_thresholds"]`` holds the chosen candidate's per slice.
    """
    if not floors:
        raise ValueError("floors must name at least one candidate (None = absolute scores)")
    if not exponents:
        raise ValueError("exponents must name at least one candidate (0 = no relevance weighting)")
    named = groups if isinstance(groups, dict) else {"all": groups}
    use_cv = (
        folds >= 2 and len(floors) * len(exponents) > 1 and min(len(gs) for gs in named.values()) >= folds
    )
    best, table = None, []
    for exponent in exponents:
        weighted = {k: weighted_groups(gs, exponent) for k, gs in named.items()}
        for floor in floors:
            rel = {k: relative_groups(gs, floor) for k, gs in weighted.items()}
            t = slices_threshold(list(rel.values()), target, confidence)
            m = metrics_at([g for gs in rel.values() for g in gs], t)
            row = {"relevance_exponent": exponent, "relative_floor": floor, "threshold": t}
            row["compression"] = m["compression"]
            if use_cv:  # rel is already relative to ``floor``
                cv = cross_validate(list(rel.values()), target, None, folds, confidence=confidence)
                row.update(cv_evidence_preserved=cv["evidence_preserved"], cv_compression=cv["compression"])
            table.append(row)
            score = row["cv_compression"] if use_cv else row["compression"]
            if best is None or score > best[0] + 1e-12:
                per = {k: calibrate_threshold(gs, target, confidence) for k, gs in rel.items()}
                best = (score, exponent, floor, t, m, per)
    _, exponent, floor, t, m, per = best
    out = {**m, "relevance_exponent": exponent, "candidates": table}
    if isinstance(groups, dict):
        out["slice_thresholds"] = per
    return floor, t, out


def _curves_resampled(groups: list[ScoredGroup], weights: np.ndarray) -> dict[str, np.ndarray]:
    """Evidence preserved, compression and F1 at every :func:`sweep` threshold, for each row of
    ``weights`` ([samples, groups]: how many times each group is drawn); ``[samples, thresholds]``.
    Row ``k`` equals :func:`metrics_at` on the groups repeated ``weights[k]`` times."""
    t = _sweep_thresholds(groups)
    n_g, n_t = len(groups), len(t)
    tok_out, tp, kept = (np.zeros((n_g, n_t)) for _ in range(3))
    tok_in, rel, evid = np.zeros(n_g), np.zeros(n_g), np.zeros(n_g)
    preserved = np.zeros((n_g, n_t))
    for i, g in enumerate(groups):
        order = np.argsort(g.scores, kind="stable")
        s = g.scores[order]
        # units kept at threshold t are the last (len - searchsorted(s, t)) of the sorted scores
        first = np.searchsorted(s, t, side="left")
        tok_out[i] = _suffix_sums(g.tokens[order].astype(float))[first]
        tp[i] = _suffix_sums(g.labels[order].astype(float))[first]
        kept[i] = len(s) - first
        tok_in[i] = g.tokens.sum()
        rel[i] = g.labels.sum()
        evid[i] = g.has_evidence
        preserved[i] = g.has_evidence & (g.critical >= t)
    w = weights.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tp_w, kept_w = w @ tp, w @ kept
        p = np.where(kept_w > 0, tp_w / kept_w, 0.0)
        r = np.where((w @ rel)[:, None] > 0, tp_w / (w @ rel)[:, None], 0.0)
        f1 = np.where(p + r > 0, 2 * p * r / (p + r), 0.0)
        return {
            "evidence_preserved": (w @ preserved) / (w @ evid)[:, None],
            "compression": 1 - (w @ tok_out) / (w @ tok_in)[:, None],
            "f1": f1,
        }


def _best(curves: dict[str, np.ndarray], targets) -> dict[str, np.ndarray]:
    out = {}
    for x in targets:
        ok = curves["evidence_preserved"] >= x - 1e-12
        best = np.where(ok, curves["compression"], -np.inf).max(axis=1)
        out[f"comp@{x:.2f}"] = np.where(np.isfinite(best), best, np.nan)
    out["best_f1"] = curves["f1"].max(axis=1)
    return out


def paired_bootstrap(
    a: list[ScoredGroup],
    b: list[ScoredGroup],
    targets: tuple[float, ...] = (0.90, 0.95, 0.97, 0.99),
    samples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, dict]:
    """How much of the difference between two systems scored on the same queries is more than
    the luck of which queries were drawn: both are re-measured on ``samples`` resamples of the
    queries (drawn with replacement, the same draw for both), and for the best compression at
    each evidence target (a threshold sweep per resample) and the best sentence F1 this gives
    ``a``, ``b`` and ``diff`` (b - a) on the queries as they are, the ``level`` interval of the
    difference (``low``, ``high``) and the share of resamples where ``b`` is ahead
    (``b_ahead``). ``a[i]`` and ``b[i]`` must be the same query.
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"paired comparison needs the same queries for both, got {len(a)} and {len(b)}")
    if samples < 1 or not 0 < level < 1:
        raise ValueError("samples must be >= 1 and level in (0, 1)")
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(len(a), np.full(len(a), 1 / len(a)), size=samples)
    weights = np.vstack([np.ones(len(a)), draws])  # row 0: the queries as they are
    best_a = _best(_curves_resampled(a, weights), targets)
    best_b = _best(_curves_resampled(b, weights), targets)
    out = {}
    for key in best_a:
        d = best_b[key] - best_a[key]
        rs = d[1:][np.isfinite(d[1:])]
        lo, hi = np.quantile(rs, [(1 - level) / 2, (1 + level) / 2]) if len(rs) else (np.nan, np.nan)
        out[key] = {
            "a": float(best_a[key][0]),
            "b": float(best_b[key][0]),
            "diff": float(d[0]),
            "low": float(lo),
            "high": float(hi),
            "b_ahead": float(np.mean(rs > 0)) if len(rs) else float("nan"),
        }
    return out
