"""Lexical retrieval among paragraphs: TF-IDF nearest neighbours (retriever-style hard distractors
for training groups, `pruner data squad --mined-distractors`, and the ``mined`` evaluation slice)
and BM25 (the ``bm25`` baseline of `pruner evaluate`, and the chunks `pruner adapt --corpus` mines
for each written question)."""

from __future__ import annotations

import math
from collections import Counter
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


class BM25:
    """Okapi BM25 over tokenized ``docs`` (``k1``, ``b`` as usual): :meth:`score` of one pair, and
    :meth:`search` of the whole collection for many queries at once (a sparse matrix product)."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self.docs = docs
        self.df = Counter(w for d in docs for w in set(d))
        self.n = len(docs)
        self.avgdl = float(np.mean([len(d) for d in docs])) if len(docs) else 1.0
        self._matrix = None

    def idf(self, w: str) -> float:
        return math.log(1 + (self.n - self.df[w] + 0.5) / (self.df[w] + 0.5))

    def _weight(self, tf: float, length: int) -> float:
        return tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * length / self.avgdl))

    def score(self, query: Sequence[str], doc: Sequence[str]) -> float:
        tf = Counter(doc)
        return sum(self.idf(w) * self._weight(tf[w], len(doc)) for w in set(query) if w in tf)

    def _index(self):
        from scipy.sparse import csr_matrix

        if self._matrix is None:
            self.vocab = {w: j for j, w in enumerate(self.df)}
            rows, cols, vals = [], [], []
            for i, d in enumerate(self.docs):
                for w, tf in Counter(d).items():
                    rows.append(i)
                    cols.append(self.vocab[w])
                    vals.append(self.idf(w) * self._weight(tf, len(d)))
            self._matrix = csr_matrix((vals, (rows, cols)), shape=(self.n, len(self.vocab)))
        return self._matrix

    def search(self, queries: Sequence[Sequence[str]], k: int) -> list[list[tuple[int, float]]]:
        """The ``k`` best documents of each tokenized query, ``(index, score)`` best first (only
        documents sharing a word with the query)."""
        from scipy.sparse import csr_matrix

        m = self._index()
        rows, cols = [], []
        for i, q in enumerate(queries):
            js = {self.vocab[w] for w in q if w in self.vocab}
            rows += [i] * len(js)
            cols += list(js)
        q = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(queries), m.shape[1]))
        mt = m.T.tocsr()
        out = []
        for s in range(0, len(queries), 256):  # a block of dense scores at a time: memory stays bounded
            sims = np.asarray((q[s : s + 256] @ mt).todense(), dtype=np.float64)
            for row in sims:
                k_ = min(k, len(row))
                top = np.argpartition(-row, k_ - 1)[:k_] if k_ else np.zeros(0, int)
                order = top[np.argsort(-row[top], kind="stable")]
                out.append([(int(j), float(row[j])) for j in order if row[j] > 0])
        return out
