"""TF-IDF nearest neighbours among paragraphs: retriever-style hard distractors for training
groups (`pruner data squad --mined-distractors`) and for the ``mined`` evaluation slice."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pruner_model.core.text import words


class TfidfIndex:
    """Log-tf, smoothed-idf, L2-normalized TF-IDF vectors of ``texts`` (scipy sparse)."""

    def __init__(self, texts: Sequence[str]):
        self.vocab: dict[str, int] = {}
        tf = self._tf(texts, grow=True)
        n = len(texts)
        df = np.bincount(tf.indices.astype(np.int64), minlength=len(self.vocab))
        self.idf = np.log((1 + n) / (1 + df)) + 1
        self.matrix = self._weigh(tf)

    def _tf(self, texts: Sequence[str], grow: bool):
        """Log term frequencies of ``texts`` over the vocabulary (``grow``: add new words)."""
        from scipy.sparse import csr_matrix

        rows, cols, vals = [], [], []
        for i, text in enumerate(texts):
            counts: dict[int, int] = {}
            for w in words(text):
                j = self.vocab.setdefault(w, len(self.vocab)) if grow else self.vocab.get(w)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
            rows += [i] * len(counts)
            cols += list(counts)
            vals += list(counts.values())
        shape = (len(texts), len(self.vocab))
        return csr_matrix((np.log1p(np.asarray(vals, dtype=np.float64)), (rows, cols)), shape=shape)

    def _weigh(self, tf):
        from scipy.sparse import csr_matrix

        m = csr_matrix(tf.multiply(self.idf[None, :]))
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel()) + 1e-12
        return csr_matrix(m.multiply(1 / norms[:, None]))

    def search(self, queries: Sequence[str], k: int, batch: int = 512) -> list[list[int]]:
        """The ``k`` texts most similar to each query (a retriever's candidates), best first."""
        q = self._weigh(self._tf(queries, grow=False))
        out: list[list[int]] = []
        for s in range(0, len(queries), batch):
            sims = np.asarray((q[s : s + batch] @ self.matrix.T).todense(), dtype=np.float32)
            k_ = min(k, sims.shape[1])
            top = np.argpartition(-sims, k_ - 1, axis=1)[:, :k_] if k_ else np.zeros((len(sims), 0), int)
            for row, cand in zip(sims, top):
                out.append([int(j) for j in cand[np.argsort(-row[cand], kind="stable")] if row[j] > 0])
        return out

    def nearest(self, i: int, k: int, exclude: np.ndarray | None = None) -> list[int]:
        """The ``k`` texts most similar to text ``i`` (itself and ``exclude[j]`` True left out)."""
        sims = np.asarray((self.matrix @ self.matrix[i].T).todense()).ravel()
        sims[i] = -np.inf
        if exclude is not None:
            sims[exclude] = -np.inf
        order = np.argsort(-sims, kind="stable")[:k]
        return [int(j) for j in order if np.isfinite(sims[j])]
