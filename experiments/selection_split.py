"""A checkpoint on the groups that choose training recipes, never reported on: groups 300-599 of
each source's permutation in ``data/qa/calibration.jsonl`` (``pruner data qa``; the default recipe
calibrates on groups 0-299 of each source). Prints, per source (and writes with ``--json``): the share of questions whose gold passage the relevance head
ranks first, the share of mined and of random passages it ranks the gold passage above,
compression at 95% and 97% of answers kept and the share of random and mined passages' tokens
kept at 95%, all on one score rule (relevance^0.25, no floor, unless ``--exponent``, ``--floor``
or ``--contrast`` say otherwise) so that runs trained with calibration off compare with
calibrated ones:

    python experiments/selection_split.py --model runs/X [--json runs/X.selection.json]
"""

from __future__ import annotations

import argparse

from pruner_model.core.records import read_jsonl, write_json
from pruner_model.evaluation.evaluator import with_score_rules
from pruner_model.evaluation.groups import load_range, records_by_source
from pruner_model.evaluation.scorer import score_groups
from pruner_model.evaluation.sources import source_metrics, with_roles

from pruner_model import ContextPruner

SPLITS = (("data/qa/calibration.jsonl", 300),)  # (file, first group of each source's permutation)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--groups", type=int, default=300, help="groups per source")
    p.add_argument("--exponent", type=float, default=0.25)
    p.add_argument("--floor", type=float, default=None, help="relative floor (default: absolute scores)")
    p.add_argument("--contrast", type=float, default=0.0, help="relevance contrast (default 0)")
    p.add_argument("--json", default=None, help="also write every source's metrics to this JSON file")
    args = p.parse_args()
    pruner = ContextPruner.from_pretrained(args.model, dtype="auto")
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    rows = {}
    print(
        "source | gold first | gold > mined | gold > random | comp. at 95% | at 97% | random tokens at 95% "
        "| mined tokens at 95%"
    )
    for path, start in SPLITS:
        for src, recs in sorted(records_by_source(with_roles(read_jsonl(path))).items()):
            groups = load_range(recs, 0, start, start + args.groups)
            raw = score_groups(pruner, groups).groups
            scored = with_score_rules(raw, args.exponent, args.floor, args.contrast)
            m = source_metrics(groups, scored, float(pruner.config.threshold), 0.95)
            rows[src] = m
            ranking = m["ranking"]
            row = [src, *(fmt(ranking.get(k)) for k in ("gold_first", "gold_over_mined", "gold_over_random"))]
            if m["queries_with_evidence"]:
                shares = m["tokens_kept_at_0.95"]
                row += [fmt(m["compression_at_0.95"]), fmt(m["compression_at_0.97"])]
                row += [fmt(shares["random"]), fmt(shares["mined"])]
            print(" | ".join(row), flush=True)
    if args.json:
        rule = {"exponent": args.exponent, "floor": args.floor, "contrast": args.contrast}
        write_json(args.json, {"model": args.model, "rule": rule, "groups": args.groups, "sources": rows})


if __name__ == "__main__":
    main()
