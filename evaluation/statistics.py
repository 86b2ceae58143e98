"""Exact binomial statistics of a threshold's promise (how many calibration queries it must keep,
the interval of the share it keeps on new ones) and paired bootstrap comparisons of two systems."""

from __future__ import annotations

import functools

import numpy as np
from pruner_model.evaluation.metrics import ScoredGroup, _suffix_sums, _sweep_thresholds


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
