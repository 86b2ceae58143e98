"""An ONNX folder's fp32 and int8 graphs at the checkpoint's default (its per-request threshold,
each request banded by its own scores) on the report splits: nyt groups 6000-6399 and their mined
and noisy copies, the low-overlap questions of groups 6000-7999, and the first 300 groups of each
``data/mix/dev.jsonl`` source with sentence labels (``--dev``, ``--nyt-groups`` and
``--source-groups`` change those: the multilingual recipe's held-back file, fewer groups).

    python experiments/int8_default.py runs/reference-onnx --output /tmp/int8_default.json
    python experiments/int8_default.py runs/multilingual-onnx --dev data/mix-ml/dev.jsonl \
        --nyt-groups 200 --source-groups 150 --output /tmp/int8_default_ml.json
"""

from __future__ import annotations

import argparse
import json

from pruner_model.core.records import read_jsonl
from pruner_model.evaluation.groups import group_of, load_groups, load_range, range_ids, records_by_source
from pruner_model.evaluation.shifts import build_shift
from pruner_model.evaluation.sources import at_threshold, score_at_default, with_roles

from pruner_model import ContextPruner


def slices(dev: str = "data/mix/dev.jsonl", nyt_groups: int = 400, source_groups: int = 300) -> dict:
    nyt = read_jsonl("data/squad/dev.jsonl")
    ids = range_ids((group_of(r) for r in nyt), 0, 6000, 6000 + nyt_groups)
    low = range_ids((group_of(r) for r in nyt), 0, 6000, 6000 + 5 * nyt_groups)
    out = {
        "nyt": build_shift("as_is", nyt, 0, ids),
        "nyt mined": build_shift("mined", nyt, 0, ids),
        "nyt noisy": build_shift("noisy", nyt, 0, ids),
        "nyt low_overlap": build_shift("low_overlap", nyt, 0, low),
    }
    out = {k: load_groups(with_roles(v)) for k, v in out.items()}
    for src, recs in sorted(records_by_source(with_roles(read_jsonl(dev))).items()):
        groups = load_range(recs, 0, 0, source_groups)
        if any(labels.any() for g in groups for labels in g.labels):
            out[src] = groups
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("onnx_folder")
    p.add_argument("--output", required=True)
    p.add_argument("--dev", default="data/mix/dev.jsonl", help="held-back groups of every source")
    p.add_argument("--nyt-groups", type=int, default=400, help="nyt report groups from 6000 on")
    p.add_argument("--source-groups", type=int, default=300, help="groups of each source")
    args = p.parse_args()
    results = {}
    for name, groups in slices(args.dev, args.nyt_groups, args.source_groups).items():
        for quantized in (False, True):
            pruner = ContextPruner.from_pretrained(args.onnx_folder, quantized=quantized, device="cpu")
            _, ruled, default = score_at_default(pruner, groups)
            m = at_threshold(ruled, default, pruner.config.target_evidence or 0.95)
            tag = f"{'int8' if quantized else 'fp32'} {name}"
            results[tag] = [m["evidence_preserved"], m["compression"]]
            print(tag, round(m["evidence_preserved"], 3), round(m["compression"], 3), flush=True)
    with open(args.output, "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
