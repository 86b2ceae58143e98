"""A lexical prior in the passage relevance: BM25 of the query against each passage of one request,
fused with the relevance head's logit (``--idf wordfreq`` needs ``pip install wordfreq``), measured on a cache of scored groups written by
``experiments/request_thresholds.py score`` (its calibration slices choose, its report slices
measure):

    python experiments/lexical_prior.py --cache /tmp/rt.pkl

Relevance becomes sigmoid(logit(head) + w * term), term a normalized BM25 of the passage within the
request (IDF over the request's own passages). Printed per slice: gold ranked first, random
passages' tokens kept at 95% of answers, compression at 95% / 97% kept; then the per-request
default fitted on the calibration slices and measured on the report slices.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import pickle
from collections import Counter
from collections.abc import Sequence

import numpy as np
from pruner_model.core.text import STOP_WORDS, words
from pruner_model.evaluation.evaluator import with_score_rules
from pruner_model.evaluation.sources import source_metrics

K1, B = 1.2, 0.75
NORMS = ("max", "z")


def bm25_within(query: str, passages: Sequence[str], k1: float = K1, b: float = B, idf=None) -> np.ndarray:
    """``[n_passages]`` BM25 of the query's content words against each passage, document
    frequencies and mean length taken over ``passages`` themselves.

    >>> bm25_within("Who built the bridge?", ["The bridge was built by Roebling.", "Bananas are yellow."]).round(2).tolist()
    [1.22, 0.0]
    """
    q = {w for w in words(query) if w not in STOP_WORDS}
    docs = [words(p) for p in passages]
    n = len(docs)
    if not n or not q:
        return np.zeros(n)
    tfs = [Counter(d) for d in docs]
    df = Counter(w for tf in tfs for w in q if w in tf)
    avgdl = max(sum(len(d) for d in docs) / n, 1.0)
    out = np.zeros(n)
    for i, (d, tf) in enumerate(zip(docs, tfs)):
        norm = k1 * (1 - b + b * len(d) / avgdl)
        for w in q:
            f = tf.get(w)
            if f:
                weight = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) if idf is None else idf(w)
                out[i] += weight * f * (k1 + 1) / (f + norm)
    return out


def lexical_prior_terms(query: str, passages: Sequence[str], norm: str = "max", idf=None) -> np.ndarray:
    """``[n_passages]`` each passage's BM25 set against the request's best, in ``[-1, 0]`` for
    ``"max"`` (``bm25 / best - 1``; all 0 when no passage shares a content word with the query) or
    in standard deviations under the best for ``"z"``.

    >>> lexical_prior_terms("Who built the bridge?", ["The bridge was built by Roebling.", "Bananas are yellow."]).tolist()
    [0.0, -1.0]
    """
    if norm not in NORMS:
        raise ValueError(f"lexical prior norm must be one of {', '.join(NORMS)}, got {norm!r}")
    s = bm25_within(query, passages, idf=idf)
    if not len(s) or s.max() <= 0:
        return np.zeros(len(s))
    if norm == "max":
        return s / s.max() - 1.0
    return (s - s.max()) / (s.std() + 1e-6) if s.std() > 0 else np.zeros(len(s))


def _logit(p):
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def _wordfreq_idf(word: str) -> float:
    from wordfreq import zipf_frequency

    return max(0.0, 8.0 - zipf_frequency(word, "en")) * np.log(10)


IDF = {"request": None, "wordfreq": _wordfreq_idf}


def fused(groups, raw, weight: float, norm: str, idf=None):
    """``raw`` with each unit's relevance set to sigmoid(logit(head) + weight * term)."""
    if not weight:
        return raw
    out = []
    for g, s in zip(groups, raw):
        texts = [p["text"] for p in g.passages]
        if norm.startswith("gated"):  # relative to the best, only where the best has strong evidence
            bm = bm25_within(g.query, texts, idf=idf)
            strong = bm.max() >= float(norm[5:]) if len(bm) else False
            term = bm / bm.max() - 1.0 if strong else np.zeros(len(texts))
        elif norm.startswith("abs"):  # an absolute level: only passages under tau are pushed down
            term = np.minimum(bm25_within(g.query, texts, idf=idf) / float(norm[3:]), 1.0) - 1.0
        else:
            term = lexical_prior_terms(g.query, texts, norm=norm, idf=idf)
        per_unit = (
            np.concatenate([np.full(len(us), t) for us, t in zip(g.units, term)]) if g.units else np.zeros(0)
        )
        rel = 1 / (1 + np.exp(-(_logit(s.relevance) + weight * per_unit)))
        out.append(dataclasses.replace(s, relevance=rel))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True)
    p.add_argument("--weights", default="0,1,2,4,8")
    p.add_argument("--norms", default="max,z")
    p.add_argument("--part", default="cal")
    p.add_argument("--idf", default="request", choices=sorted(IDF))
    p.add_argument("--fit", action="store_true", help="also fit the per-request default (8 bands)")
    args = p.parse_args()
    with open(args.cache, "rb") as f:
        cache = pickle.load(f)
    rule = cache["rule"]
    e, fl, c = rule["relevance_exponent"], rule["relative_floor"], rule["relevance_contrast"]
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    for norm in args.norms.split(","):
        for w in (float(x) for x in args.weights.split(",")):
            if w == 0 and norm != args.norms.split(",")[0]:
                continue
            cells, c95 = [], []
            for name, (groups, raw) in cache[args.part].items():
                scored = with_score_rules(fused(groups, raw, w, norm, IDF[args.idf]), e, fl, c)
                m = source_metrics(groups, scored, 0.5, 0.95)
                cell = f"{name}: first {fmt(m['ranking']['gold_first'])}"
                if m["queries_with_evidence"]:
                    rnd = m["tokens_kept_at_0.95"].get("random")
                    cell += f" c95 {fmt(m['compression_at_0.95'])} c97 {fmt(m['compression_at_0.97'])} rnd {fmt(rnd)}"
                    c95.append(m["compression_at_0.95"])
                cells.append(cell)
            print(f"{norm} w={w} mean c95 {np.mean(c95):.3f} | " + " | ".join(cells), flush=True)
            if args.fit:
                _fit(cache, w, norm, IDF[args.idf])


def _fit(cache, w: float, norm: str, idf) -> None:
    from pruner_model.evaluation.threshold_fit import FitSlice, RequestDefault, fit_threshold_model

    import experiments.request_thresholds as rt

    changed = dict(cache)
    for part in ("cal", "report"):
        changed[part] = {k: (g, fused(g, r, w, norm, idf)) for k, (g, r) in cache[part].items()}
    data = rt._prepare(changed)
    slices = [FitSlice(k, v[2], v[0]) for k, v in data["cal"].items()]
    model = fit_threshold_model(slices, 0.95, bands=8)
    rt._evaluate(data, lambda X: RequestDefault(model.thresholds_of(X), model.min_relevance), f"{norm} w={w}")


if __name__ == "__main__":
    main()
