"""A checkpoint's per-request threshold: which band of text a request looks like, and the
threshold (and passage relevance gate) calibrated for that band.

A score of the request's features (:mod:`pruner_model.core.request_features`) says how much the
request looks like text whose evidence survives a high threshold. Two forms:

- *sources* (what calibration fits): one logistic classifier per calibration slice (that slice
  against the others) gives how likely the request comes from each; the score is the slice's own
  threshold (log10) expected under those probabilities, so a request that reads like numerical
  questions over sports reports gets the score of the text that needs that slice's threshold;
- *linear* (`score="hard_easy"` in the fit; checkpoints that carry `weights`): one logistic classifier of the
  slices that need a low threshold against those that do not; the score is its negated logit.

The calibration groups are cut into bands by that score (equal shares of them); each band has its
own threshold,
chosen together so that every calibration slice still keeps its promised share of answers
(:mod:`pruner_model.evaluation.threshold_fit`). A request is thresholded by its band's threshold;
``min_relevance`` drops the passages the relevance head rates under it.

Requests unlike every calibration slice (their features' Mahalanobis distance from the
calibration requests past ``novelty_cutoff``, the distance that the calibration requests' own
quantile sets) are thresholded at most at ``novelty_threshold``: the threshold that keeps a
stricter share of answers on every calibration slice. The bands say what text like the
calibration's needs; text like none of it (dialogue, legal boilerplate for a model trained on
encyclopedic text) needs thresholds well below any band, and no calibration slice can say how far
below, so such a request falls back to the calibration's safest threshold. Its passages face the
gate ``novelty_min_relevance`` where one is set (None: ``min_relevance``): the relevance head's
probabilities fall on such text too, and a gate calibrated on familiar text drops its answers.

A second linear score of the same features may say how likely the request's passages hold an
answer at all (a logistic classifier of calibration groups with evidence against those without);
requests under ``answer_edge`` are thresholded by their band's ``unlikely_thresholds`` instead, so
that a request whose retriever found nothing can be handed on almost empty.

It lives in ``config.json`` as ``threshold_model`` (plain numbers, no code), so a torch checkpoint,
its ONNX export and its int8 file apply the same one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cached_property

import numpy as np
from pruner_model.core.request_features import FEATURES

FIELDS = ("features", "mean", "scale", "edges", "thresholds", "min_relevance")
LINEAR_FIELDS = ("weights", "bias")  # the linear score: these, or else all of SOURCE_FIELDS
SOURCE_FIELDS = ("sources", "source_weights", "source_bias", "source_log_thresholds")
ANSWER_FIELDS = ("answer_weights", "answer_bias", "answer_edge", "unlikely_thresholds")  # all or none
NOVELTY_FIELDS = ("novelty_precision", "novelty_cutoff", "novelty_threshold")  # all or none
NOVELTY_GATE = "novelty_min_relevance"  # optional, with NOVELTY_FIELDS only


def _numbers(xs) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in xs)


@dataclass(frozen=True)
class ThresholdModel:
    """Predicts one request's threshold from its :data:`FEATURES` (see the module docstring)."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    edges: tuple[float, ...]  # ascending score edges between bands (one fewer than thresholds)
    thresholds: tuple[float, ...]  # each band's threshold, lowest score band first
    min_relevance: float | None = None  # the passage relevance gate of the default operating point
    weights: tuple[float, ...] | None = None  # the linear score (None: the sources score)
    bias: float | None = None
    # the sources score: each calibration slice's name, its classifier's weights (one row a slice,
    # on the standardized features) and bias, and its own threshold's log10
    sources: tuple[str, ...] | None = None
    source_weights: tuple[tuple[float, ...], ...] | None = None
    source_bias: tuple[float, ...] | None = None
    source_log_thresholds: tuple[float, ...] | None = None
    # how likely the passages hold an answer (higher: likelier), and the band thresholds of the
    # requests under answer_edge; None: one threshold a band
    answer_weights: tuple[float, ...] | None = None
    answer_bias: float | None = None
    answer_edge: float | None = None
    unlikely_thresholds: tuple[float, ...] | None = None
    # unfamiliar requests: the precision matrix of the calibration requests' standardized features,
    # the Mahalanobis distance past which a request is unfamiliar, and the threshold it gets at most
    novelty_precision: tuple[tuple[float, ...], ...] | None = None
    novelty_cutoff: float | None = None
    novelty_threshold: float | None = None
    novelty_min_relevance: float | None = None  # the unfamiliar requests' gate (None: min_relevance)

    def __post_init__(self) -> None:
        n = len(self.features)
        if tuple(self.features) != FEATURES:
            raise ValueError(
                "threshold_model was fitted on other request features than this version computes; "
                "recalibrate the checkpoint"
            )
        if not (len(self.mean) == len(self.scale) == n):
            raise ValueError(f"threshold_model needs {n} means and scales")
        self._check_score(n)
        if len(self.thresholds) != len(self.edges) + 1 or not self.thresholds:
            raise ValueError("threshold_model needs one threshold more than band edges")
        if not _numbers((*self.mean, *self.scale, *self.edges, *self.thresholds)):
            raise ValueError("threshold_model holds a value that is not a finite number")
        if any(s <= 0 for s in self.scale):
            raise ValueError("threshold_model scales must be positive")
        if list(self.edges) != sorted(self.edges):
            raise ValueError("threshold_model band edges must be ascending")
        if not all(0.0 <= t <= 1.0 for t in self.thresholds):
            raise ValueError("threshold_model thresholds must be in [0, 1]")
        answer = [getattr(self, k) for k in ANSWER_FIELDS]
        if any(v is None for v in answer) and any(v is not None for v in answer):
            raise ValueError(f"threshold_model needs all of {', '.join(ANSWER_FIELDS)} or none")
        if self.answer_weights is not None:
            if len(self.answer_weights) != n or len(self.unlikely_thresholds) != len(self.thresholds):
                raise ValueError(f"threshold_model needs {n} answer weights and a threshold a band")
            if not _numbers(
                (*self.answer_weights, self.answer_bias, self.answer_edge, *self.unlikely_thresholds)
            ):
                raise ValueError("threshold_model holds a value that is not a finite number")
            if not all(0.0 <= t <= 1.0 for t in self.unlikely_thresholds):
                raise ValueError("threshold_model thresholds must be in [0, 1]")
        self._check_novelty(n)
        for k in ("min_relevance", NOVELTY_GATE):
            v = getattr(self, k)
            if v is not None and not (_numbers([v]) and 0 <= v <= 1):
                raise ValueError(f"threshold_model {k} must be null or in [0, 1]")
        if self.novelty_min_relevance is not None and self.novelty_precision is None:
            raise ValueError(f"threshold_model {NOVELTY_GATE} needs {', '.join(NOVELTY_FIELDS)}")

    def _check_novelty(self, n: int) -> None:
        novelty = [getattr(self, k) for k in NOVELTY_FIELDS]
        if any(v is None for v in novelty) and any(v is not None for v in novelty):
            raise ValueError(f"threshold_model needs all of {', '.join(NOVELTY_FIELDS)} or none")
        if self.novelty_precision is None:
            return
        rows = self.novelty_precision
        if len(rows) != n or any(len(r) != n for r in rows):
            raise ValueError(f"threshold_model novelty_precision must be {n} x {n}")
        if not _numbers((*(x for r in rows for x in r), self.novelty_cutoff, self.novelty_threshold)):
            raise ValueError("threshold_model holds a value that is not a finite number")
        if self.novelty_cutoff <= 0 or not 0.0 <= self.novelty_threshold <= 1.0:
            raise ValueError("threshold_model novelty_cutoff must be positive, novelty_threshold in [0, 1]")

    def _check_score(self, n: int) -> None:
        """Exactly one score form, each of its values a finite number of the right count."""
        linear = [getattr(self, k) is not None for k in LINEAR_FIELDS]
        source = [getattr(self, k) is not None for k in SOURCE_FIELDS]
        if not (all(linear) and not any(source)) and not (all(source) and not any(linear)):
            raise ValueError(
                f"threshold_model needs either {' and '.join(LINEAR_FIELDS)} or all of {', '.join(SOURCE_FIELDS)}"
            )
        if all(linear):
            if len(self.weights) != n or not _numbers((*self.weights, self.bias)):
                raise ValueError(f"threshold_model needs {n} finite weights and a finite bias")
            return
        k = len(self.sources)
        rows = self.source_weights
        if not k or len(rows) != k or len(self.source_bias) != k or len(self.source_log_thresholds) != k:
            raise ValueError("threshold_model needs a weight row, a bias and a threshold for each source")
        if any(len(r) != n for r in rows) or not all(isinstance(x, str) for x in self.sources):
            raise ValueError(f"threshold_model needs {n} weights for each named source")
        if not _numbers((*(x for r in rows for x in r), *self.source_bias, *self.source_log_thresholds)):
            raise ValueError("threshold_model holds a value that is not a finite number")

    @cached_property
    def _arrays(self) -> dict[str, np.ndarray]:
        """The fields as arrays, converted once (a request's threshold is computed per request)."""
        out = {"mean": np.asarray(self.mean), "scale": np.asarray(self.scale)}
        if self.novelty_precision is not None:
            out["precision"] = np.asarray(self.novelty_precision)
        return out

    def _standard(self, features: np.ndarray) -> np.ndarray:
        return (np.asarray(features, dtype=np.float64) - self._arrays["mean"]) / self._arrays["scale"]

    def source_probabilities(self, features: np.ndarray) -> np.ndarray:
        """``[n, sources]``: how likely each request comes from each calibration slice (the
        one-against-the-rest classifiers' logits, normalized by a softmax)."""
        logits = self._standard(np.atleast_2d(features)) @ np.asarray(self.source_weights).T
        logits = logits + np.asarray(self.source_bias)
        p = np.exp(logits - logits.max(1, keepdims=True))
        return p / p.sum(1, keepdims=True)

    def scores(self, features: np.ndarray) -> np.ndarray:
        """The band score of each request (``[n]`` for ``[n, d]`` features): higher looks like
        text whose evidence survives a higher threshold."""
        if self.weights is None:
            return self.source_probabilities(features) @ np.asarray(self.source_log_thresholds)
        return self._standard(features) @ np.asarray(self.weights) + self.bias

    def answer_scores(self, features: np.ndarray) -> np.ndarray | None:
        """How likely each request's passages hold an answer (higher: likelier); None without."""
        if self.answer_weights is None:
            return None
        return self._standard(features) @ np.asarray(self.answer_weights) + self.answer_bias

    def bands(self, features: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.asarray(self.edges), self.scores(features))

    def unlikely(self, features: np.ndarray) -> np.ndarray:
        """``[n]`` bool: the requests thresholded by ``unlikely_thresholds``."""
        answer = self.answer_scores(features)
        if answer is None:
            return np.zeros(len(np.atleast_2d(features)), dtype=bool)
        return answer < self.answer_edge

    def novelty(self, features: np.ndarray) -> np.ndarray | None:
        """``[n]``: each request's Mahalanobis distance from the calibration requests (None without)."""
        if self.novelty_precision is None:
            return None
        z = self._standard(np.atleast_2d(features))
        return np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", z, self._arrays["precision"], z), 0.0))

    def unfamiliar(self, features: np.ndarray) -> np.ndarray:
        """``[n]`` bool: the requests unlike every calibration slice."""
        distance = self.novelty(features)
        if distance is None:
            return np.zeros(len(np.atleast_2d(features)), dtype=bool)
        return distance > self.novelty_cutoff

    def _decide(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each request's threshold and whether it is unfamiliar (``features``: ``[n, d]``)."""
        bands = self.bands(features)
        out = np.asarray(self.thresholds)[bands]
        if self.unlikely_thresholds is not None:
            low = self.unlikely(features)
            out[low] = np.asarray(self.unlikely_thresholds)[bands[low]]
        far = self.unfamiliar(features)
        if self.novelty_threshold is not None:
            out[far] = np.minimum(out[far], self.novelty_threshold)
        return out, far

    def gate(self, unfamiliar: bool) -> float | None:
        """The passage relevance gate of a request (familiar or not)."""
        if unfamiliar and self.novelty_min_relevance is not None:
            return self.novelty_min_relevance
        return self.min_relevance

    def gates_of(self, features: np.ndarray) -> np.ndarray:
        """``[n]``: each request's passage relevance gate, NaN where there is none."""
        bands = np.full(
            len(np.atleast_2d(features)), np.nan if self.min_relevance is None else self.min_relevance
        )
        if self.novelty_min_relevance is None:  # one gate for every request
            return bands
        return np.where(self.unfamiliar(features), self.novelty_min_relevance, bands)

    def thresholds_of(self, features: np.ndarray) -> np.ndarray:
        """Each request's threshold (``features``: ``[n, d]``)."""
        return self._decide(features)[0]

    def request(self, features: np.ndarray) -> tuple[float, bool]:
        """One request's threshold and whether it is unfamiliar (``features``: ``[d]``)."""
        threshold, far = self._decide(np.asarray(features, dtype=np.float64)[None, :])
        return float(threshold[0]), bool(far[0])

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.answer_weights is None:  # a file without the answer split reads as before
            for k in ANSWER_FIELDS:
                del d[k]
        if self.novelty_min_relevance is None:  # nor one without the unfamiliar requests' gate
            del d[NOVELTY_GATE]
        if self.novelty_precision is None:  # nor one without the unfamiliar-request fallback
            for k in NOVELTY_FIELDS:
                del d[k]
        else:
            d["novelty_precision"] = [[float(x) for x in row] for row in self.novelty_precision]
        for k in LINEAR_FIELDS if self.weights is None else SOURCE_FIELDS:
            del d[k]
        if self.source_weights is not None:
            d["source_weights"] = [[float(x) for x in row] for row in self.source_weights]
        for k in (
            "features",
            "mean",
            "scale",
            "weights",
            "edges",
            "thresholds",
            "answer_weights",
            "unlikely_thresholds",
            "sources",
            "source_bias",
            "source_log_thresholds",
        ):
            if k in d:
                d[k] = [x if isinstance(x, str) else float(x) for x in d[k]]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ThresholdModel:
        if not isinstance(d, dict):
            raise ValueError("threshold_model must be a JSON object")
        known = (
            set(FIELDS)
            | set(LINEAR_FIELDS)
            | set(SOURCE_FIELDS)
            | set(ANSWER_FIELDS)
            | set(NOVELTY_FIELDS)
            | {NOVELTY_GATE}
        )
        missing, extra = set(FIELDS) - set(d), set(d) - known
        if missing or extra:
            raise ValueError(f"threshold_model fields: missing {sorted(missing)}, unknown {sorted(extra)}")
        lists = ("features", "mean", "scale", "edges", "thresholds")
        optional = ("weights", "answer_weights", "unlikely_thresholds", *SOURCE_FIELDS)
        if not all(isinstance(d[k], list) for k in lists) or not all(
            isinstance(d.get(k), list | None) for k in optional
        ):
            raise ValueError(f"threshold_model fields {', '.join(lists + optional)} must be lists")
        matrices = {}
        for k in ("source_weights", "novelty_precision"):
            rows = d.get(k)
            if rows is not None and not (isinstance(rows, list) and all(isinstance(r, list) for r in rows)):
                raise ValueError(f"threshold_model {k} must be a list of lists")
            matrices[k] = None if rows is None else tuple(tuple(r) for r in rows)
        return cls(
            **{k: tuple(d[k]) if k in lists else d[k] for k in FIELDS},
            **{
                k: tuple(d[k]) if k in optional and d.get(k) is not None else d.get(k)
                for k in known - set(FIELDS) - set(matrices)
            },
            **matrices,
        )
