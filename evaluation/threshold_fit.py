"""Fitting a checkpoint's per-request threshold (:class:`~pruner_model.core.threshold_model.ThresholdModel`)
on calibration slices.

1. Each calibration slice has its own threshold for the target (the highest that keeps the target
   share of its queries' evidence): multi-sentence and coreference evidence, whose weakest
   evidence sentence scores far below the best one, needs thresholds 100x lower than factoid
   questions over news.
2. The band score (``score="sources"``): one logistic regression on the request features for each
   slice with evidence (that slice against the others), their logits normalized by a softmax into
   how likely a request comes from each slice, and the slices' own thresholds (log10) averaged
   under those probabilities. ``score="hard_easy"`` (kept for comparison, and read from older checkpoints): one
   logistic regression of the slices whose own threshold lies below the log-midpoint of the
   lowest and the highest against the others, its negated logit the score. Chosen on the
   calibration slices alone (two folds, docs/experiments/results-log.md): the sources score lifts
   the weakest slice's compression from 0.75 to 0.87 of its own threshold's (quickstart).
3. The calibration groups are cut into ``bands`` bands of equal size by that score, and each band
   gets its own threshold (and all share one passage relevance gate, from ``gates``): starting from
   one threshold that meets the target everywhere, a band's threshold is raised, one candidate at a
   time, by the move that compresses the calibration slices most (their mean compression, each
   slice weighing the same) while every slice still keeps the target (with ``confidence``, the
   count :func:`required_kept` asks for given the slice's size), until no move is left.
4. Optionally (``answer_shares``: the fit tries none and each share, and keeps what compresses
   most), a second logistic regression on the same features tells the groups with evidence from
   those without; the share of calibration groups it rates least likely answered get a threshold
   a band of their own, raised by the same moves. Requests whose retriever found nothing are
   handed on nearly empty where the features can tell them, and where they cannot, nothing is lost:
   the answered groups among them still count towards every slice's target.
5. Unfamiliar requests (``novelty``: the fit's default :data:`NOVELTY`): the calibration requests'
   standardized features give a precision matrix (ridge :data:`NOVELTY_RIDGE`) and a cutoff, the
   Mahalanobis distance that ``quantile`` of them stay within; a request past it gets at most the
   threshold under which every slice with evidence keeps ``tail`` of its queries' evidence. The
   bands are fitted on calibration text and can only say what such text needs; a model's scores
   on text unlike all of it need far lower thresholds, by an amount no calibration slice shows
   (docs/results.md measures it on whole data sets never trained or calibrated on). The relevance
   head's probabilities fall there too: its passages' gate is at most :data:`UNFAMILIAR_GATE`.
So every slice keeps its promise, as under one threshold, while requests that look like easy text
are thresholded like easy text. docs/design.md says why and how it was measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pruner_model.core.request_features import FEATURES, request_features
from pruner_model.core.threshold_model import ThresholdModel
from pruner_model.evaluation.calibration import calibrate_threshold
from pruner_model.evaluation.groups import LabeledGroup
from pruner_model.evaluation.metrics import ScoredGroup, weighted_groups
from pruner_model.evaluation.statistics import required_kept

CANDIDATES = np.logspace(-4.5, -0.3, 80)  # thresholds a band may take (relative to the best unit)
GATES = (None, 0.02, 0.05)  # passage relevance gates tried with the bands
STEPS = (1, 2, 4, 8)  # candidate steps one move may take
MIN_SPREAD = 4.0  # the slices' own thresholds must span this factor for bands to pay
# (share of calibration requests within the cutoff, share kept past it): chosen on whole data sets a
# model trained without them never saw (experiments/request_thresholds.py proxy, docs/design.md)
NOVELTY = (0.95, 0.995)
# the highest passage relevance gate an unfamiliar request faces, chosen the same way (docs/design.md:
# a never-seen set kept 0.860 of its answers behind 0.05 and 0.987 behind 0.02)
UNFAMILIAR_GATE = 0.02
NOVELTY_RIDGE = 0.05  # added to the standardized features' covariance before it is inverted


@dataclass(frozen=True)
class FitSlice:
    """One calibration slice: its groups (rule-scored: the scores the threshold is compared with,
    each unit with its passage's relevance probability) and each group's request features
    (``[n, len(FEATURES)]``)."""

    name: str
    groups: list[ScoredGroup]
    features: np.ndarray


def _logistic(X: np.ndarray, y: np.ndarray, l2: float, iterations: int = 25):
    """Standardization and weights of an L2-penalized logistic regression (Newton's method)."""
    mean, scale = X.mean(0), X.std(0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    Z = np.c_[(X - mean) / scale, np.ones(len(X))]
    beta = np.zeros(Z.shape[1])
    penalty = np.diag([l2] * X.shape[1] + [0.0])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(Z @ beta, -30, 30)))
        grad = Z.T @ (p - y) + penalty @ beta
        hess = (Z * (p * (1 - p))[:, None]).T @ Z + penalty + 1e-9 * np.eye(len(beta))
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return mean, scale, beta[:-1], float(beta[-1])


@dataclass
class _Table:
    """One slice under one gate: tokens kept and evidence kept at every candidate threshold."""

    kept_tokens: np.ndarray  # [groups, candidates]
    total: float  # tokens of all its groups
    evidence: np.ndarray  # [groups with evidence, candidates] bool: all evidence kept
    with_evidence: np.ndarray  # [groups] bool
    need: int  # groups with evidence that must keep it

    @classmethod
    def of(cls, groups: list[ScoredGroup], kept: list, evidence: list, has: list, target: float, confidence):
        """From each group's tokens kept, and each evidence row (all kept?), at every candidate."""
        return cls(
            np.asarray(kept, dtype=np.float64).reshape(len(groups), len(CANDIDATES)),
            float(sum(int(g.tokens.sum()) for g in groups)),
            np.asarray(evidence, dtype=bool).reshape(len(evidence), len(CANDIDATES)),
            np.asarray(has, dtype=bool),
            required_kept(len(evidence), target, confidence) if evidence else 0,
        )


def _table(groups: list[ScoredGroup], gate: float | None, target: float, confidence) -> _Table:
    kept, evidence, has = [], [], []
    for g in groups:
        scores = g.scores if gate is None else np.where(g.relevance >= gate, g.scores, -1.0)
        order = np.argsort(-scores)
        cum = np.concatenate([[0], np.cumsum(g.tokens[order])])
        n_over = np.searchsorted(-scores[order], -CANDIDATES, side="right")  # units >= each candidate
        kept.append(cum[n_over])
        has.append(g.has_evidence)
        if g.has_evidence:
            evidence.append(scores[g.labels].min() >= CANDIDATES)
    return _Table.of(groups, kept, evidence, has, target, confidence)


def _cells(
    tables: list[_Table], cells: list[np.ndarray], k: int, criterion: str = "gain"
) -> tuple[np.ndarray, float] | None:
    """Each cell's candidate index (see the module docstring, step 3) and the mean compression;
    None when even the lowest candidate misses the target on some slice. ``cells``: each slice's
    groups' cell in ``range(k)``. ``criterion``: each move is the one that compresses most
    (``gain``) or most per answer it costs, each slice's answers counted as shares of those it must
    keep (``ratio``)."""
    ar = np.arange(k)
    # per slice and cell: tokens kept, and groups keeping all their evidence, at every candidate
    kept = np.stack([[t.kept_tokens[c == j].sum(0) for j in ar] for t, c in zip(tables, cells)])
    evidence = np.stack(
        [[t.evidence[c[t.with_evidence] == j].sum(0) for j in ar] for t, c in zip(tables, cells)]
    )
    need = np.array([t.need for t in tables])
    total = np.array([max(t.total, 1.0) for t in tables])

    def kept_evidence(idx):
        return evidence[:, ar, idx].sum(1)

    def feasible(idx):
        return bool((kept_evidence(idx) >= need).all())

    def compression(idx):
        return float(np.mean(1 - kept[:, ar, idx].sum(1) / total))

    idx = np.zeros(k, dtype=np.int64)
    if not feasible(idx):
        return None
    while idx[0] < len(CANDIDATES) - 1 and feasible(idx + 1):  # one threshold for all cells first
        idx += 1
    while True:
        best, now, have = None, compression(idx), kept_evidence(idx)
        for cell in range(k):
            for step in STEPS:
                move = idx.copy()
                move[cell] = min(move[cell] + step, len(CANDIDATES) - 1)
                if move[cell] == idx[cell] or not feasible(move):
                    continue
                c = compression(move)
                if criterion == "ratio":
                    cost = float(((have - kept_evidence(move)) / np.maximum(need, 1)).sum())
                    c = (c - now) / (cost + 1e-6)
                if best is None or c > best[0] + 1e-12:
                    best = (c, move)
        if best is None:
            return idx, compression(idx)
        idx = best[1]


def _answer_splits(slices: list[FitSlice], mean, scale, l2: float, shares, band_of, bands: int) -> list:
    """``(split, cells, cells' count)`` without an answer split (``split``: ``(None, None, None)``,
    the bands are the cells) and, for each share, with one: ``split`` = the answerability
    classifier's weights, bias and the edge under which that share of the calibration groups
    falls, whose groups get cells of their own (``band + bands``)."""
    out: list = [((None, None, None), band_of, bands)]
    has = np.concatenate([[g.has_evidence for g in s.groups] for s in slices]).astype(float)
    if not shares or has.min() == has.max():  # every group answered (or none): nothing to tell apart
        return out
    Z = [(s.features - mean) / scale for s in slices]
    zm, zs, weights, bias = _logistic(np.concatenate(Z), has, l2)  # on Z standardized again: fold in
    w = weights / zs
    b = bias - float(zm @ w)
    answer = [z @ w + b for z in Z]
    for share in shares:
        edge = float(np.quantile(np.concatenate(answer), share))
        out.append(((w, b, edge), [bo + bands * (a < edge) for bo, a in zip(band_of, answer)], 2 * bands))
    return out


def _hard_easy(slices: list[FitSlice], own: dict[str, float], l2: float) -> dict:
    """The linear score's fields: a logistic regression of the slices whose own threshold lies
    below the log-midpoint of the lowest and highest against the others, its negated logit."""
    logs = {name: np.log(max(t, 1e-9)) for name, t in own.items()}
    middle = (min(logs.values()) + max(logs.values())) / 2
    X = np.concatenate([s.features for s in slices])
    y = np.concatenate([np.full(len(s.groups), float(logs.get(s.name, 0.0) < middle)) for s in slices])
    mean, scale, weights, bias = _logistic(X, y, l2)
    return dict(
        mean=tuple(float(x) for x in mean),
        scale=tuple(float(x) for x in scale),
        weights=tuple(float(-w) for w in weights),  # the score rises with easiness
        bias=float(-bias),
    )


def _source_score(slices: list[FitSlice], own: dict[str, float], l2: float) -> dict:
    """The sources score's fields (module docstring, step 2): standardization over the slices with
    evidence, one classifier a slice on it, and each slice's own threshold's log10."""
    live = [s for s in slices if s.name in own]
    X = np.concatenate([s.features for s in live])
    mean, scale = X.mean(0), X.std(0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    Z = (X - mean) / scale
    rows, biases = [], []
    for s in live:
        y = np.concatenate([np.full(len(t.groups), float(t is s)) for t in live])
        zm, zs, w, b = _logistic(Z, y, l2)  # _logistic standardizes Z again: folded back in
        rows.append(tuple(float(x) for x in w / zs))
        biases.append(float(b - zm @ (w / zs)))
    return dict(
        mean=tuple(float(x) for x in mean),
        scale=tuple(float(x) for x in scale),
        sources=tuple(s.name for s in live),
        source_weights=tuple(rows),
        source_bias=tuple(biases),
        source_log_thresholds=tuple(float(np.log10(max(own[s.name], 1e-9))) for s in live),
    )


def fit_threshold_model(
    slices: list[FitSlice],
    target: float,
    confidence: float | None = None,
    bands: int = 8,
    l2: float = 1.0,
    gates: tuple[float | None, ...] = GATES,
    answer_shares: tuple[float, ...] = (),
    criterion: str = "gain",
    score: str = "sources",
    novelty: tuple[float, float] | None = NOVELTY,
    unfamiliar_gate: float | None = UNFAMILIAR_GATE,
) -> ThresholdModel | None:
    """The per-request threshold model of ``slices`` (see the module docstring); None when the
    slices' own thresholds lie within a factor :data:`MIN_SPREAD` (one threshold serves them all)."""
    if score not in ("sources", "hard_easy"):
        raise ValueError(f"score must be 'sources' or 'hard_easy', got {score!r}")
    live = [s for s in slices if any(g.has_evidence for g in s.groups)]
    own = {s.name: calibrate_threshold(s.groups, target, confidence) for s in live}
    if not own:
        return None
    low, high = np.log(max(min(own.values()), 1e-9)), np.log(max(max(own.values()), 1e-9))
    if high - low < np.log(MIN_SPREAD):  # one threshold serves every slice about as well
        return None
    fields = (_source_score if score == "sources" else _hard_easy)(slices, own, l2)
    scorer = ThresholdModel(features=FEATURES, edges=(), thresholds=(0.0,), **fields)
    band_score = [scorer.scores(s.features) for s in slices]
    edges = np.quantile(np.concatenate(band_score), np.linspace(0, 1, bands + 1)[1:-1])
    band_of = [np.searchsorted(edges, sc) for sc in band_score]
    mean, scale = np.asarray(fields["mean"]), np.asarray(fields["scale"])
    splits = _answer_splits(slices, mean, scale, l2, answer_shares, band_of, bands)
    best = None
    for gate in gates:
        tables = [_table(s.groups, gate, target, confidence) for s in slices]
        for split, cells, k in splits:
            found = _cells(tables, cells, k, criterion)
            if found is not None and (best is None or found[1] > best[0] + 1e-12):
                best = (found[1], found[0], gate, split)
    if best is None:
        return None
    _, idx, gate, (w, b, edge) = best
    answer = {}
    if w is not None:
        answer = dict(
            answer_weights=tuple(float(x) for x in w),
            answer_bias=float(b),
            answer_edge=edge,
            unlikely_thresholds=tuple(float(CANDIDATES[i]) for i in idx[bands:]),
        )
        idx = idx[:bands]
    unfamiliar = novelty_fields(slices, mean, scale, novelty, confidence, gate, unfamiliar_gate)
    return ThresholdModel(
        features=FEATURES,
        **fields,
        edges=tuple(float(x) for x in edges),
        thresholds=tuple(float(CANDIDATES[i]) for i in idx),
        min_relevance=gate,
        **answer,
        **unfamiliar,
    )


def novelty_fields(
    slices: list[FitSlice],
    mean: np.ndarray,
    scale: np.ndarray,
    novelty: tuple[float, float] | None,
    confidence: float | None = None,
    gate: float | None = None,
    cap: float | None = UNFAMILIAR_GATE,
) -> dict:
    """The unfamiliar-request fallback of ``slices`` (step 5 of the module docstring) for
    ``novelty`` = ``(quantile, tail)``: the ``novelty_*`` fields of a :class:`ThresholdModel`
    standardizing by ``mean`` and ``scale``, with the gate ``cap`` for unfamiliar requests where
    the bands' ``gate`` is over it; none without ``novelty``."""
    if novelty is None:
        return {}
    quantile, tail = novelty
    if not 0 < quantile < 1 or not 0 < tail <= 1:
        raise ValueError(f"novelty needs a quantile in (0, 1) and a tail in (0, 1], got {quantile}, {tail}")
    z = (np.concatenate([s.features for s in slices]) - mean) / scale
    precision = np.linalg.inv(np.cov(z.T) + NOVELTY_RIDGE * np.eye(z.shape[1]))
    distance = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", z, precision, z), 0.0))
    live = [s for s in slices if any(g.has_evidence for g in s.groups)]
    return dict(
        novelty_precision=tuple(tuple(float(x) for x in row) for row in precision),
        novelty_cutoff=float(np.quantile(distance, quantile)),
        novelty_threshold=float(min(calibrate_threshold(s.groups, tail, confidence) for s in live)),
        **({"novelty_min_relevance": float(cap)} if None not in (gate, cap) and gate > cap else {}),
    )


def unit_texts(group: LabeledGroup) -> tuple[list[str], np.ndarray]:
    """Every unit's text of a labeled group, passages flattened in order, and each unit's passage."""
    texts: list[str] = []
    passage: list[int] = []
    for i, (p, units) in enumerate(zip(group.passages, group.units)):
        texts += [u.text_of(p["text"]) for u in units]
        passage += [i] * len(units)
    return texts, np.asarray(passage, dtype=np.int64)


def group_features(
    groups: list[LabeledGroup],
    raw: list[ScoredGroup],
    exponent: float,
    floor: float | None,
    contrast: float = 0.0,
) -> np.ndarray:
    """``[n, len(FEATURES)]``: each labeled group's request features from its raw scores (the
    token head's, with each unit's passage relevance) under the score rule ``exponent``, ``floor``,
    ``contrast``, exactly as :class:`~pruner_model.ContextPruner` computes them for a request."""
    weighted = weighted_groups(raw, exponent, contrast)
    out = np.zeros((len(groups), len(FEATURES)))
    for k, (g, s) in enumerate(zip(groups, weighted)):
        texts, passage = unit_texts(g)
        relevance = np.zeros(len(g.passages))
        if raw[k].relevance is not None and len(passage):
            relevance[passage] = raw[k].relevance  # each unit carries its passage's probability
        out[k] = request_features(g.query, texts, passage, s.scores, floor, relevance)
    return out


@dataclass(frozen=True)
class RequestDefault:
    """The checkpoint's default operating point on scored groups: each group's threshold and
    the passage relevance gate (None: no gate; or one gate a group, NaN for none)."""

    thresholds: np.ndarray
    min_relevance: float | np.ndarray | None

    @classmethod
    def of(cls, model: ThresholdModel, features: np.ndarray) -> RequestDefault:
        """``model``'s threshold and gate for each request of ``features``."""
        return cls(model.thresholds_of(features), model.gates_of(features))

    def masks(self, groups: list[ScoredGroup]) -> list[np.ndarray]:
        """What each (rule-scored) group keeps at its threshold, behind the gate."""
        default = np.nan if self.min_relevance is None else self.min_relevance
        gates = np.broadcast_to(default, len(self.thresholds))
        out = []
        for g, t, gate in zip(groups, self.thresholds, gates):
            keep = g.scores >= t
            if not np.isnan(gate) and g.relevance is not None:
                keep &= g.relevance >= gate
            out.append(keep)
        return out


def request_default(config, groups: list[LabeledGroup], raw: list[ScoredGroup]) -> RequestDefault | None:
    """The checkpoint's per-request default on ``groups`` (``config``: a PrunerConfig; ``raw``:
    the groups' scores as :func:`score_groups` returns them); None when the checkpoint has one
    threshold for every request."""
    tm = getattr(config, "threshold_model", None)
    if tm is None:
        return None
    X = group_features(
        groups, raw, config.relevance_exponent, config.relative_floor, config.relevance_contrast
    )
    model = ThresholdModel.from_dict(tm)
    return RequestDefault.of(model, X)
