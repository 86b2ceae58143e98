"""Speed of several checkpoints on the same queries, measured in one run (ratios are the result;
absolute times depend on the machine and its load).

    python benchmarks/bench_models.py --models runs/quickstart runs/multilingual [--queries 60]

Each model prunes the same dev groups (`data/qa/dev.jsonl` of ``pruner data qa``), in rounds that alternate the
models so that load changes hit them alike; reported: seconds per query (median of the rounds),
the ratio to the first model, and the encoder tokens each model's tokenizer makes of the same
passages (a 250k-piece multilingual vocabulary cuts English into fewer or more pieces).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--data", default="data/qa/dev.jsonl")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--output", default="benchmarks/reports/models.json")
    args = ap.parse_args()

    from pruner_model.core.alignment import count_tokens
    from pruner_model.core.precision import machine_info
    from pruner_model.inference import ContextPruner

    groups: dict[str, list[dict]] = {}
    with open(args.data, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            groups.setdefault(r["query"], []).append(r)
            if len(groups) > args.queries:
                break
    items = [(q, [r["context"] for r in rs]) for q, rs in list(groups.items())[: args.queries]]
    pruners = {m: ContextPruner.from_pretrained(m, dtype=args.dtype) for m in args.models}
    for p in pruners.values():  # warm-up
        p.prune(*items[0])
    seconds = {m: [] for m in args.models}
    for _ in range(args.rounds):
        for m, p in pruners.items():
            t0 = time.perf_counter()
            for q, ps in items:
                p.prune(q, ps)
            seconds[m].append((time.perf_counter() - t0) / len(items))
    base = float(np.median(seconds[args.models[0]]))
    report = {"machine": machine_info("cpu").describe(), "queries": len(items), "models": {}}
    print("| model | precision | s / query | ratio | passage tokens |\n|---|---|---|---|---|")
    for m, p in pruners.items():
        med = float(np.median(seconds[m]))
        tokens = count_tokens(p.tokenizer, [t for _, ps in items for t in ps])
        report["models"][m] = {
            "seconds_per_query": med,
            "ratio": med / base,
            "tokens": tokens,
            "precision": p.precision,
        }
        print(f"| {m} | {p.precision} | {med:.3f} | {med / base:.2f} | {tokens} |")
    print(f"({report['machine']}, {len(items)} queries x {args.rounds} rounds)")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
