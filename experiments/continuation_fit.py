"""The per-request bands fitted with ``continuation`` on (each candidate threshold's keep mask in
the fit's tables grown along answer runs, docs/design.md) against the same fit without it, from
the cache of ``experiments/request_thresholds.py score`` (calibration slices: the fit's; report
and never-trained slices: measured at each fit's default with the same continuation):

    python experiments/request_thresholds.py score --model pruner_model/default_model --cache /tmp/rt.pkl --heldout
    python experiments/continuation_fit.py --cache /tmp/rt.pkl --shares 0.5 0.3

Rows: kept / compression / answer-less groups' tokens kept.
"""

from __future__ import annotations

import argparse
import pickle

import numpy as np
import pruner_model.evaluation.threshold_fit as threshold_fit
from continuation import default_masks, units_of
from pruner_model.evaluation.metrics import metrics_at
from pruner_model.evaluation.threshold_fit import (
    CANDIDATES,
    FitSlice,
    RequestDefault,
    _Table,
    fit_threshold_model,
)
from pruner_model.inference.selection import continue_answers
from request_thresholds import _prepare

UNITS: dict[int, object] = {}  # id(scored group) -> its units (passage and paragraph of each)
SHARE: list[float | None] = [None]


def kept_grid(scores: np.ndarray, units, thresholds: np.ndarray, share) -> np.ndarray:
    """``[units, thresholds]``: kept at each threshold, grown along runs at ``share`` of it."""
    keep = scores[:, None] >= thresholds[None, :]
    if share is None:
        return keep
    return continue_answers(units, keep, scores[:, None] >= share * thresholds[None, :])


def _gated(g, gate) -> np.ndarray:
    return g.scores if gate is None or np.isnan(gate) else np.where(g.relevance >= gate, g.scores, -1.0)


def _table(groups, gate, target, confidence) -> _Table:
    """threshold_fit's table, each candidate's mask through :func:`kept_grid`."""
    kept, evidence = [], []
    for g in groups:
        grid = kept_grid(_gated(g, gate), UNITS[id(g)], CANDIDATES, SHARE[0])
        kept.append(g.tokens @ grid)
        if g.has_evidence:
            evidence.append(grid[g.labels].all(0))
    return _Table.of(groups, kept, evidence, [g.has_evidence for g in groups], target, confidence)


def _measure(data, model, share) -> None:
    """Each report and never-trained slice at ``model``'s default, continued at ``share``."""
    for part in ("report", "heldout"):
        for name, (X, _, gs, groups) in data.get(part, {}).items():
            if any(g.has_evidence for g in gs):
                m = metrics_at(
                    gs, float("nan"), default_masks(groups, gs, RequestDefault.of(model, X), share)
                )
                print(
                    f"  {part:7s} {name:20s} {m['evidence_preserved']:.3f} / {m['compression']:.3f} / "
                    f"{m['negative_tokens_kept']:.3f}"
                )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True)
    p.add_argument("--shares", type=float, nargs="+", default=[0.5, 0.3])
    p.add_argument("--target", type=float, default=0.95)
    args = p.parse_args()
    with open(args.cache, "rb") as f:
        data = _prepare(pickle.load(f))
    for part in data.values():
        for _, (_, _, gs, groups) in part.items():
            for sg, lg in zip(gs, groups):
                UNITS[id(sg)] = units_of(lg, sg)
    threshold_fit._table = _table
    slices = [FitSlice(k, v[2], v[0]) for k, v in data["cal"].items()]
    for share in [None, *args.shares]:
        SHARE[0] = share
        model = fit_threshold_model(slices, args.target)
        print(
            f"fitted with continuation {share}: bands {[round(t, 4) for t in model.thresholds]}, gate {model.min_relevance}"
        )
        _measure(data, model, share)


if __name__ == "__main__":
    main()
