"""Does the untrained bi-encoder (the bundled all-MiniLM-L6-v2, cosine of mean-pooled embeddings)
add passage discrimination to a trained pruner's relevance head? Scores the selection groups
(groups 300-599 of each source of ``data/qa/calibration.jsonl``) with both once (cached under
``--cache``), then prints gold first / gold > random / compression at 95% and 97%
kept for combinations of the two:

    python experiments/biencoder_ensemble.py --model runs/default
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
from pathlib import Path

import numpy as np
from pruner_model.core.records import read_jsonl
from pruner_model.evaluation.baselines import biencoder_scores
from pruner_model.evaluation.evaluator import with_score_rules
from pruner_model.evaluation.groups import load_range, records_by_source
from pruner_model.evaluation.scorer import score_groups
from pruner_model.evaluation.sources import source_metrics, with_roles

SPLITS = (("data/qa/calibration.jsonl", 300),)  # (file, first group of each source's permutation)


def load(model: str, groups_per_source: int, cache: Path):
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    from pruner_model import ContextPruner

    pruner = ContextPruner.from_pretrained(model, dtype="auto")
    out = {}
    for path, start in SPLITS:
        for src, recs in sorted(records_by_source(with_roles(read_jsonl(path))).items()):
            groups = load_range(recs, 0, start, start + groups_per_source)
            raw = score_groups(pruner, groups).groups
            cos = biencoder_scores(groups)
            out[src] = (groups, raw, cos)
            print("scored", src, len(groups), flush=True)
    cache.write_bytes(pickle.dumps(out))
    return out


def logit(p):
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def combine(raw, cos, lam: float, tau: float, mode: str, sent_beta: float = 0.0):
    """Scored groups whose relevance is sigmoid(logit(head) + lam * passage cosine term)."""
    out = []
    for s, c in zip(raw, cos):
        pmax = np.array([cc.max() if len(cc) else 0.0 for cc in c])
        if mode == "abs":
            term = (pmax - 0.5) / tau  # cosine mapped to [0,1]: 0.5 is orthogonal
        else:  # relative to the group's best passage
            term = (pmax - pmax.max()) / tau
        per_unit = np.concatenate([np.full(len(cc), t) for cc, t in zip(c, term)]) if len(c) else np.zeros(0)
        rel = s.relevance
        if rel is not None and lam:
            rel = 1 / (1 + np.exp(-(logit(rel) + lam * per_unit)))
        scores = s.scores
        if sent_beta:
            scores = scores * np.power(np.concatenate(c) if len(c) else np.zeros(0), sent_beta)
        out.append(dataclasses.replace(s, relevance=rel, scores=scores))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--groups", type=int, default=300, help="groups per source")
    p.add_argument("--cache", type=Path, default=Path("reports/biencoder_ensemble.pkl"))
    p.add_argument("--exponents", default="0.25,0.5,1.0")
    args = p.parse_args()
    args.cache.parent.mkdir(parents=True, exist_ok=True)
    data = load(args.model, args.groups, args.cache)
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    settings = [("head", 0.0, 1.0, "abs", 0.0)]
    for mode in ("abs", "rel"):
        for lam in (0.5, 1.0, 2.0, 4.0):
            for tau in (0.05, 0.1):
                settings.append((f"{mode} lam={lam} tau={tau}", lam, tau, mode, 0.0))
    settings += [("head sent*cos^1", 0.0, 1.0, "abs", 1.0), ("head sent*cos^4", 0.0, 1.0, "abs", 4.0)]
    exps = [float(e) for e in args.exponents.split(",")]
    for name, lam, tau, mode, beta in settings:
        for e in exps:
            row = [f"{name} e={e}"]
            for src, (groups, raw, cos) in data.items():
                scored = with_score_rules(combine(raw, cos, lam, tau, mode, beta), e, None)
                m = source_metrics(groups, scored, 0.5, 0.95)
                cell = f"{src}: first {fmt(m['ranking']['gold_first'])}"
                if m["queries_with_evidence"]:
                    cell += f" c95 {fmt(m['compression_at_0.95'])} c97 {fmt(m['compression_at_0.97'])}"
                    cell += f" rnd {fmt(m['tokens_kept_at_0.95']['random'])}"
                row.append(cell)
            print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
