"""How sentence scores become the scores a threshold is compared with: relative to the query's best
sentence (a relative floor) and weighted by the passage relevance head, whose probabilities may be
set against the request's best passage (a relevance contrast). Inference, calibration and config
validation apply the same rules."""

from __future__ import annotations

import numpy as np


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


MAX_RELEVANCE_CONTRAST = 8.0


def check_relevance_contrast(contrast: float) -> None:
    if (
        isinstance(contrast, bool)
        or not isinstance(contrast, (int, float))
        or not 0.0 <= contrast <= MAX_RELEVANCE_CONTRAST
    ):
        raise ValueError(
            f"relevance_contrast must be a number in [0, {MAX_RELEVANCE_CONTRAST:g}], got {contrast!r}"
        )


def contrasted_relevance(relevance: np.ndarray, contrast: float) -> np.ndarray:
    """The relevance probabilities of one request's passages (one per passage, or one per unit)
    set against the request's best: ``sigmoid(logit(r) + contrast * (logit(r) - max logit(r)))``.
    The best passage keeps its probability; a passage the head rates far below it falls further,
    so its sentences need higher token scores to be kept. A request with one passage, or
    ``contrast`` 0, is unchanged.

    >>> contrasted_relevance(np.array([0.9, 0.5, 0.1]), 1.0).round(4).tolist()
    [0.9, 0.1, 0.0014]
    """
    check_relevance_contrast(contrast)
    r = np.asarray(relevance, dtype=np.float64)
    if contrast == 0 or not r.size:
        return r
    z = np.log(np.clip(r, 1e-12, 1.0)) - np.log1p(-np.clip(r, 0.0, 1.0 - 1e-12))
    return 1.0 / (1.0 + np.exp(-(z + contrast * (z - z.max()))))
