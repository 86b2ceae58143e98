"""Out-of-domain protocol: a checkpoint on nyt dev groups as they are and on the three shifted
slices built from the same groups (pruner_model.evaluation.shifts): compression at each evidence
level, best sentence F1, and what the checkpoint's own threshold promised vs what it kept, with
the exact 95% interval of the share kept and a verdict: met, within chance (under the target, the
interval reaching it) or missed (pruner_model.evaluation.statistics.promise_check).

    python3 benchmarks/shift_protocol.py --model runs/quickstart --start 6000 --groups 400 \
        --output reports/shift-quickstart.json

Prints a markdown table; with --baselines also scores the lexical and bi-encoder baselines (they do
not depend on the model). Choose settings on one range of groups and report on another.

With two or more --model and --compare N, each later model is also compared with the first on
the same queries: the difference of every column with its 95% interval over N resamples of the
queries (pruner_model.evaluation.statistics.paired_bootstrap), so a difference that a few hundred queries
cannot tell from luck shows as one:

    python3 benchmarks/shift_protocol.py --model runs/quickstart --model runs/qs-new \
        --start 1000 --groups 800 --compare 1000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

TARGETS = ("0.90", "0.95", "0.97", "0.99")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", default=[], help="checkpoint or ONNX folder (repeatable)")
    ap.add_argument("--data", default="data/qa/dev.jsonl", help="labeled dev records (with meta.answers)")
    ap.add_argument("--start", type=int, default=6000, help="first group of the seeded permutation")
    ap.add_argument("--groups", type=int, default=400, help="groups per slice")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--slices",
        default="as_is,mined,low_overlap,noisy",
        help="comma list; join shifts with '+' to combine them, e.g. as_is,mined+noisy",
    )
    ap.add_argument("--baselines", default="", help="comma list, e.g. lexical,biencoder")
    ap.add_argument(
        "--target", type=float, default=None, help="promised evidence (default: the checkpoint's)"
    )
    ap.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="also show what this threshold (the checkpoint's scale) keeps, e.g. nyt-only=0.012 (repeatable)",
    )
    ap.add_argument(
        "--compare",
        type=int,
        default=0,
        metavar="N",
        help="compare each later --model with the first on N paired resamples of the queries",
    )
    ap.add_argument(
        "--dtype",
        choices=["auto", "fp32", "bf16"],
        default=None,
        help="torch checkpoints: score in this precision (auto: bf16 where it is native; default fp32)",
    )
    ap.add_argument("--output", default=None, help="write all numbers here (JSON)")
    args = ap.parse_args(argv)
    if not args.model and not args.baselines:
        ap.error("give --model and/or --baselines")
    if args.compare < 0:
        ap.error(f"--compare takes a number of resamples >= 1, got {args.compare}")
    if args.compare and len(args.model) < 2:
        ap.error("--compare needs at least two --model")
    if not Path(args.data).is_file():
        ap.error(f"no dev records at {args.data} (build them with 'pruner data qa')")

    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.evaluator import Evaluator
    from pruner_model.evaluation.groups import group_of, range_ids
    from pruner_model.evaluation.shifts import build_shift

    from pruner_model import ContextPruner

    records = read_jsonl(args.data)
    keep = range_ids((group_of(r) for r in records), args.seed, args.start, args.start + args.groups)
    slices = {name: build_shift(name, records, args.seed, keep) for name in args.slices.split(",")}
    rows, out = [], {"start": args.start, "groups": args.groups, "seed": args.seed, "results": {}}
    scored = {}  # (model, slice) -> scored groups, for --compare
    systems = [(m, m) for m in args.model]
    baselines = tuple(b for b in args.baselines.split(",") if b)
    if baselines:
        systems.append(("baselines", args.model[0] if args.model else None))
    for name, model in systems:
        if model is None:
            ap.error("--baselines needs one --model for the token counts")
        pruner = ContextPruner.from_pretrained(model, **({"dtype": args.dtype} if args.dtype else {}))
        print(f"{name}: {pruner.backend.name} {pruner.precision}", file=sys.stderr)
        target = args.target or pruner.config.target_evidence or 0.95
        for sl, recs in slices.items():
            t0 = time.perf_counter()
            ev = Evaluator(
                recs,
                target=target,
                baselines=baselines if name == "baselines" else (),
                pipeline=False,
                thresholds=dict((k, float(v)) for k, v in (t.split("=", 1) for t in args.threshold)),
            ).evaluate(pruner)
            rep, groups = ev.report, ev.systems
            if name != "baselines":
                scored[(model, sl)] = groups["pruner"]
            wanted = {k: v for k, v in rep["systems"].items() if (k != "pruner") == (name == "baselines")}
            wanted.pop("pruner_absolute", None)
            for sys_name, s in wanted.items():
                label = Path(model).name if sys_name == "pruner" else sys_name
                at = rep["operating_point"]["at_checkpoint_threshold"]
                row = {
                    "system": label,
                    "slice": sl,
                    "groups": rep["groups"],
                    **{
                        f"comp@{t}": (
                            None
                            if s["best_compression_at"][t] is None
                            else s["best_compression_at"][t]["compression"]
                        )
                        for t in TARGETS
                    },
                    "best_f1": s["best_f1"],
                    "promised": target if sys_name == "pruner" else None,
                    "kept": at["evidence_preserved"] if sys_name == "pruner" else None,
                    "compression_at_threshold": at["compression"] if sys_name == "pruner" else None,
                }
                promise = at.get("promise") if sys_name == "pruner" else None
                if promise:  # exact 95% interval of the share kept, and whether the promise holds
                    row["kept_interval"], row["verdict"] = promise["interval"], promise["verdict"]
                unc = rep["operating_point"].get("uncertain")
                if sys_name == "pruner" and unc:
                    row["uncertain_share"] = unc["share_flagged"]
                    row["kept_with_keep_all"] = unc["evidence_with_keep_all"]
                    row["compression_with_keep_all"] = unc["compression_with_keep_all"]
                rows.append(row)
                out["results"].setdefault(label, {})[sl] = row
                for extra, m in (
                    rep["operating_point"]["at_thresholds"] if sys_name == "pruner" else {}
                ).items():
                    alt = {**row, "system": f"{label} @ {extra}", "kept": m["evidence_preserved"]}
                    alt.update(compression_at_threshold=m["compression"], uncertain_share=None)
                    alt.update(kept_interval=None, verdict=None)
                    rows.append(alt)
                    out["results"].setdefault(alt["system"], {})[sl] = alt
            print(f"{name} {sl}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    fmt = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
    print(
        "| system | slice | "
        + " | ".join(f"comp @ {t}" for t in TARGETS)
        + " | best F1 | promised → kept (compression) | uncertain queries |"
    )
    print("|---|---|" + "---|" * (len(TARGETS) + 3))
    for r in rows:
        if r.get("uncertain_share") is not None:
            r["note"] = (
                f"{r['uncertain_share']:.0%} flagged; keep_all: {r['kept_with_keep_all']:.3f} "
                f"({r['compression_with_keep_all']:.3f})"
            )
        kept = (
            "—"
            if r["kept"] is None
            else f"{r['promised']:.2f} → {r['kept']:.3f} ({r['compression_at_threshold']:.3f})"
        )
        if r.get("kept_interval"):
            kept += " [{:.3f}, {:.3f}] {}".format(*r["kept_interval"], r["verdict"])
        print(
            f"| {r['system']} | {r['slice']} | "
            + " | ".join(fmt(r[f"comp@{t}"]) for t in TARGETS)
            + f" | {fmt(r['best_f1'])} | {kept} | {r.get('note', '')} |"
        )
    if args.compare:
        out["compare"] = compare_table(args.model, list(slices), scored, args.compare, args.seed)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(out, indent=2))
    return 0


def compare_table(models, slices, scored, samples, seed) -> dict:
    """Print, and return, each later model against the first on every slice (paired bootstrap)."""
    from pruner_model.evaluation.statistics import paired_bootstrap

    first, out = models[0], {}
    keys = [f"comp@{t}" for t in TARGETS] + ["best_f1"]
    print(
        f"\nPaired with {Path(first).name} on the same queries ({samples} resamples): difference, 95% interval,"
    )
    print("share of resamples where the later model is ahead.\n")
    print("| model | slice | " + " | ".join(k.replace("comp@", "comp @ ") for k in keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for model in models[1:]:
        for sl in slices:
            res = paired_bootstrap(scored[(first, sl)], scored[(model, sl)], samples=samples, seed=seed)
            out.setdefault(Path(model).name, {})[sl] = res
            cells = [
                "—"
                if res[k]["diff"] != res[k]["diff"]
                else f"{res[k]['diff']:+.3f} [{res[k]['low']:+.3f}, {res[k]['high']:+.3f}] {res[k]['b_ahead']:.0%}"
                for k in keys
            ]
            print(f"| {Path(model).name} | {sl} | " + " | ".join(cells) + " |")
    return out


if __name__ == "__main__":
    sys.exit(main())
