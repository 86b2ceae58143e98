"""What ``continuation`` (docs/api.md) buys and costs on the shipped model at its default: each
set's answers kept (all, and those over two or more sentences) and compression, at each share of
the request's threshold, through the selection step itself
(:func:`pruner_model.inference.selection.continue_answers`). Scores are cached per split:

    python experiments/continuation.py --data data/qa/calibration.jsonl --cache /tmp/cont_cal.pkl
    python experiments/continuation.py --data data/qa/dev.jsonl --cache /tmp/cont_dev.pkl
    python experiments/continuation.py --data data/qa/heldout.jsonl --cache /tmp/cont_heldout.pkl

Groups 0-299 of each set (as docs/results.md), torch fp32, the per-request threshold and gate of
the checkpoint (``--model``, default the shipped one).
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import numpy as np

SHARES = (None, 0.5, 0.3, 0.1)


def _scored(model: str, data: str, groups: int, cache: Path) -> dict:
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.groups import load_range, records_by_source
    from pruner_model.evaluation.sources import score_at_default, with_roles

    from pruner_model import ContextPruner

    pruner = ContextPruner.from_pretrained(model, dtype="fp32")
    out = {}
    for src, records in sorted(records_by_source(with_roles(read_jsonl(data))).items()):
        gs = load_range(records, 0, 0, groups)
        if any(any(lab.any() for lab in g.labels) for g in gs):
            _, scored, default = score_at_default(pruner, gs)
            out[src] = (gs, scored, default)
    cache.write_bytes(pickle.dumps(out))
    return out


def units_of(group, scored):
    """The selection steps' view of a labeled group's units (passage and paragraph of each)."""
    from pruner_model.inference.selection import Units

    return Units(
        scores=scored.scores,
        passage=np.concatenate([np.full(len(us), k) for k, us in enumerate(group.units)]),
        paragraph=np.array([u.paragraph for us in group.units for u in us]),
        heading=np.full(len(scored.scores), -1),
        tokens=scored.tokens,
        texts=[""] * len(scored.scores),
        relevance=np.ones(len(group.units)),
    )


def default_masks(groups, scored, default, share) -> list[np.ndarray]:
    """Each group's kept units at its default, continued at ``share`` of its threshold."""
    from pruner_model.inference.selection import continue_answers

    if share is None:
        return default.masks(scored)
    return [
        continue_answers(units_of(g, s), keep, s.scores >= share * t)
        for g, s, keep, t in zip(groups, scored, default.masks(scored), default.thresholds)
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--cache", required=True, type=Path)
    p.add_argument("--model", default="pruner_model/default_model")
    p.add_argument("--groups", type=int, default=300)
    args = p.parse_args()
    from pruner_model.evaluation.metrics import metrics_at

    data = _scored(args.model, args.data, args.groups, args.cache)
    print("| set | " + " | ".join(f"continuation {s}" for s in SHARES) + " |")
    print("|---|" + "---|" * len(SHARES))
    for src, (gs, scored, default) in data.items():
        cells = []
        for share in SHARES:
            masks = default_masks(gs, scored, default, share)
            m = metrics_at(scored, float("nan"), masks)
            long = [bool(k[s.labels].all()) for s, k in zip(scored, masks) if s.labels.sum() >= 2]
            many = f", 2+: {np.mean(long):.2f} ({len(long)})" if long else ""
            cells.append(f"{m['evidence_preserved']:.3f}{many} / {m['compression']:.3f}")
        print(f"| {src} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
