"""TF-IDF nearest neighbours among paragraphs: retriever-style hard distractors for training
groups (`pruner data squad --mined-distractors`) and for the ``mined`` evaluation slice."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pruner_model.evaluation.groups import words


class TfidfIndex:
    """Log-tf, smoothed-idf, L2-normalized TF-IDF vectors of ``texts`` (scipy sparse)."""

    def __init__(self, texts: Sequence[str]):
        from scipy.sparse import csr_matrix

        vocab: dict[str, int] = {}
        rows, cols, vals = [], [], []
        for i, text in enumerate(texts):
            counts: dict[int, int] = {}
            for w in words(text):
                j = vocab.setdefault(w, len(vocab))
                counts[j] = counts.get(j, 0) + 1
            rows += [i] * len(counts)
            cols += list(counts)
            vals += list(counts.values())
        n = len(texts)
        tf = csr_matrix((np.log1p(np.asarray(vals, dtype=np.float64)), (rows, cols)), shape=(n, len(vocab)))
        df = np.bincount(np.asarray(cols, dtype=np.int64), minlength=len(vocab))
        m = csr_matrix(tf.multiply(np.log((1 + n) / (1 + df)) + 1))
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel()) + 1e-12
        self.matrix = csr_matrix(m.multiply(1 / norms[:, None]))

    def nearest(self, i: int, k: int, exclude: np.ndarray | None = None) -> list[int]:
        """The ``k`` texts most similar to text ``i`` (itself and ``exclude[j]`` True left out)."""
        sims = np.asarray((self.matrix @ self.matrix[i].T).todense()).ravel()
        sims[i] = -np.inf
        if exclude is not None:
            sims[exclude] = -np.inf
        order = np.argsort(-sims, kind="stable")[:k]
        return [int(j) for j in order if np.isfinite(sims[j])]
