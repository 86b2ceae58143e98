"""Baselines that `pruner evaluate` puts beside the model, each giving every unit of each passage
a score, so the same threshold sweep and metric code measure them: keep everything; top-N
passages by BM25; sentence lexical overlap with a density bonus (0.7·|q∩s|/|q| + 0.3·|q∩s|/|s|
over stop-word-free word sets); bi-encoder cosine between query and sentence with the bundled
all-MiniLM-L6-v2 (needs torch)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pruner_model.core.retrieval import BM25
from pruner_model.evaluation.groups import STOP_WORDS, LabeledGroup, content_words, words

Scores = list[list[np.ndarray]]  # per group, per passage: one score per unit
BASELINES: dict[str, tuple[str, Callable[..., Scores]]] = {}


def baseline(cli_name: str, system: str):
    """Register a baseline: ``fn(groups, progress=None) -> Scores``; ``--baselines`` offers
    ``cli_name``, reports name it ``system``."""

    def register(fn):
        BASELINES[cli_name] = (system, fn)
        return fn

    return register


@baseline("all", "keep_all")
def keep_all_scores(groups: list[LabeledGroup], progress=None) -> Scores:
    """Every unit scores 1: the uncompressed context."""
    return [[np.ones(len(u)) for u in g.units] for g in groups]


@baseline("lexical", "lexical_overlap")
def lexical_baseline(groups: list[LabeledGroup], progress=None) -> Scores:
    return [lexical_scores(g) for g in groups]


def lexical_scores(g: LabeledGroup) -> list[np.ndarray]:
    q = content_words(g.query)
    out = []
    for p, us in zip(g.passages, g.units):
        sc = []
        for u in us:
            s = content_words(u.text_of(p["text"]))
            inter = len(q & s)
            sc.append(0.7 * inter / len(q) + 0.3 * inter / len(s) if q and s else 0.0)
        out.append(np.array(sc))
    return out


@baseline("bm25", "bm25_top_n")
def bm25_scores(groups: list[LabeledGroup], progress=None) -> Scores:
    """Every unit of a passage gets (P - rank) / P, rank by BM25 within the group: a threshold
    then keeps the top-N passages whole."""
    bm = BM25([words(p["text"]) for g in groups for p in g.passages])
    out = []
    for g in groups:
        q = [w for w in words(g.query) if w not in STOP_WORDS]
        s = np.array([bm.score(q, words(p["text"])) for p in g.passages])
        ranks = np.argsort(np.argsort(-s, kind="stable"), kind="stable")
        n = len(g.passages)
        out.append([np.full(len(us), (n - rk) / n) for us, rk in zip(g.units, ranks)])
    return out


@baseline("biencoder", "biencoder_cosine")
def biencoder_scores(groups: list[LabeledGroup], progress=None, batch_size: int = 128) -> Scores:
    """Cosine similarity of mean-pooled all-MiniLM-L6-v2 embeddings, mapped to [0, 1]."""
    from pruner_model.core.biencoder import BiEncoder

    enc = BiEncoder(batch_size=batch_size)
    out = []
    for g in groups:
        texts = [u.text_of(p["text"]) for p, us in zip(g.passages, g.units) for u in us]
        cos = (enc.sentence_cosines([g.query], [texts])[0] + 1) / 2
        sizes = np.cumsum([len(us) for us in g.units])[:-1]
        out.append(list(np.split(cos, sizes)))
        if progress is not None:
            progress.update(1)
    return out
