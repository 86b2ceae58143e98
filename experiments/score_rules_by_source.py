"""Score a labeled file's groups once per source, then compare score rules (relevance exponent x
relative floor) by what each source keeps at 95% of answers: compression, and the share of random
and mined passages' tokens kept. For choosing settings on a split that is not reported on, e.g.

    python experiments/score_rules_by_source.py --model runs/default \
        --data data/qa/calibration.jsonl@300 --max-groups 400

(``FILE@N``: that file's groups start at N of each source's permutation, default ``--start``.)
"""

from __future__ import annotations

import argparse

from pruner_model.evaluation.calibration import calibrate_threshold
from pruner_model.evaluation.evaluator import with_score_rules
from pruner_model.evaluation.groups import load_range, records_by_source, source_of
from pruner_model.evaluation.metrics import best_compression_at, sweep
from pruner_model.evaluation.scorer import score_groups
from pruner_model.evaluation.sources import role_token_shares, with_roles

from pruner_model import ContextPruner


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", nargs="+", required=True)
    p.add_argument("--start", type=int, default=200)
    p.add_argument("--max-groups", type=int, default=400)
    p.add_argument("--exponents", default="0,0.25,0.5,1,2,4")
    p.add_argument("--floors", default="none,0.05,0.1,0.2")
    args = p.parse_args()
    from pruner_model.core.records import read_jsonl

    pruner = ContextPruner.from_pretrained(args.model, dtype="auto")
    records, starts = [], {}
    for spec in args.data:
        path, _, start = spec.partition("@")
        part = with_roles(read_jsonl(path))
        records += part
        starts.update({source_of(r): int(start) if start else args.start for r in part})
    by_source = records_by_source(records)
    scored = {}
    for src, recs in sorted(by_source.items()):
        gs = load_range(recs, 0, starts[src], starts[src] + args.max_groups)
        if any(g.has_evidence for g in gs):
            scored[src] = (gs, score_groups(pruner, gs).groups)
    floors = [None if f == "none" else float(f) for f in args.floors.split(",")]
    print("exponent floor | " + " | ".join(f"{s}: comp95 F1 random mined" for s in scored))
    for e in [float(x) for x in args.exponents.split(",")]:
        for f in floors:
            row = []
            for gs, raw in scored.values():
                sg = with_score_rules(raw, e, f)
                best = best_compression_at(sweep(sg), 0.95)
                shares = role_token_shares(gs, sg, calibrate_threshold(sg, 0.95))
                fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
                row.append(
                    f"{fmt(best and best['compression'])} {fmt(shares['random'])} {fmt(shares['mined'])}"
                )
            print(f"{e} {f} | " + " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
