"""`pruner evaluate`: compression against evidence kept, for the model and baselines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pruner_model.commands.common import (
    DEFAULT_MODEL_HELP,
    add_precision_argument,
    existing_model_dir,
    load_pruner,
)


def _evaluate_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner evaluate",
        description="Measure compression against evidence kept on labeled records (JSONL), for the model "
        "(checkpoint or ONNX folder) and baselines (keep all, BM25 top-N passages, lexical overlap, "
        "bi-encoder cosine). Writes OUTPUT/report.json, report.md and curve.png; recommends the threshold "
        "that reaches --target-evidence and, with --write-threshold, stores it in the model's config.json.",
    )
    p.add_argument("--model", default=None, help=f"checkpoint or ONNX export folder {DEFAULT_MODEL_HELP}")
    p.add_argument(
        "--data",
        required=True,
        nargs="+",
        help="labeled records (JSONL), e.g. data/qa/dev.jsonl (several files are read as one)",
    )
    p.add_argument("--output", required=True, help="report folder")
    p.add_argument("--target-evidence", type=float, default=0.97)
    p.add_argument(
        "--confidence",
        type=float,
        default=None,
        help="recommend the threshold that keeps --target-evidence on new queries with this confidence "
        "(0.5-1, an exact binomial bound on the groups evaluated) instead of on these groups alone",
    )
    p.add_argument(
        "--max-groups",
        type=int,
        default=500,
        help="evaluate N query groups of the seeded permutation training slices dev data with "
        "(0 = every group)",
    )
    p.add_argument("--start", type=int, default=0, help="first group of that permutation (default 0)")
    p.add_argument("--seed", type=int, default=0, help="permutation seed (training's data.seed)")
    p.add_argument(
        "--baselines",
        default="all,bm25,lexical,biencoder",
        help="comma list of baselines (all, bm25, lexical, biencoder) or 'none'",
    )
    p.add_argument(
        "--slice",
        default=None,
        help="evaluate a shifted slice built from the selected groups (every annotator's answer "
        "labeled): as_is, mined = TF-IDF-nearest distractors from the whole file, low_overlap = "
        "answers sharing <= 1 content word with the query, noisy = lower-cased, thinned "
        "punctuation, typos; join shifts with '+' to combine them (mined+noisy)",
    )
    p.add_argument(
        "--by-source",
        action="store_true",
        help="report each source of the records apart (groups --start:--start+--max-groups of each "
        "source's permutation): compression at 95%% and 97%% kept, best F1, the promise at the "
        "checkpoint's threshold, tokens kept by passage role (gold, same document, mined, random, no "
        "answer), how the relevance head ranks gold passages and the promise by how many sentences "
        "the answer spans (1, 2, 3+); writes sources.json and sources.md",
    )
    p.add_argument("--budgets", default="", help="comma list of token budgets to measure, e.g. 128,256")
    _add_model_arguments(p)
    return p


def _add_model_arguments(p: argparse.ArgumentParser) -> None:
    """How the model runs, and where the recommended threshold is stored."""
    p.add_argument("--backend", choices=["auto", "torch", "onnx"], default="auto")
    p.add_argument("--quantized", action="store_true", help="use model.int8.onnx of an ONNX folder")
    add_precision_argument(p)
    p.add_argument(
        "--write-threshold", action="store_true", help="store the recommended threshold in the model"
    )
    p.add_argument(
        "--write-operating-point",
        metavar="NAME",
        help="store the recommended threshold in the model as the named operating point NAME (the "
        "checkpoint's threshold stays; prune(..., operating_point=NAME) uses it): a threshold for "
        "text like these records",
    )


def evaluate_main(argv: list[str] | None = None) -> int:
    args = _evaluate_parser().parse_args(argv)
    settings = _check_arguments(args)
    model_dir = existing_model_dir(args.model)
    records = _read_records(args)
    from tqdm.auto import tqdm

    from pruner_model.evaluation.evaluator import evaluate

    pruner = load_pruner(model_dir, args, quantized=args.quantized)
    if args.by_source:
        return _by_source(args, pruner, records)
    report = evaluate(
        pruner,
        records,
        target=args.target_evidence,
        seed=args.seed,
        confidence=args.confidence,
        progress_factory=lambda n, desc: tqdm(total=n, desc=desc, unit="query"),
        **settings,
    )
    out = _write_report(args, pruner, report)
    from pruner_model.evaluation.calibrate import write_operating_point, write_threshold

    if args.write_threshold:
        write_threshold(model_dir, pruner, float(report["recommended_threshold"]), args.target_evidence)
    if args.write_operating_point:
        write_operating_point(model_dir, args.write_operating_point, float(report["recommended_threshold"]))
    print((out / "report.md").read_text(encoding="utf-8"))
    return 0


def _check_arguments(args) -> dict:
    """Every argument checked before the data or the model is read; the evaluator's settings."""
    from pruner_model.evaluation.baselines import BASELINES
    from pruner_model.evaluation.statistics import check_confidence

    if not 0 < args.target_evidence <= 1:
        raise ValueError("--target-evidence must be in (0, 1]")
    try:
        check_confidence(args.confidence)
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
    if args.max_groups < 0 or args.start < 0:
        raise ValueError("--max-groups and --start must be >= 0")
    if args.slice is not None:
        from pruner_model.evaluation.shifts import shift_parts

        shift_parts(args.slice)  # an unknown slice fails before the data is read
    baselines = tuple(b for b in args.baselines.split(",") if b and b != "none")
    unknown = sorted(set(baselines) - set(BASELINES))
    if unknown:
        raise ValueError(f"unknown baseline {unknown[0]!r} (choose from {', '.join(BASELINES)})")
    budgets = tuple(int(b) for b in args.budgets.split(",") if b.strip())
    if args.write_operating_point is not None:
        name = args.write_operating_point
        if args.write_threshold or args.by_source or args.quantized:
            raise ValueError(
                "--write-operating-point stores a full-precision threshold from one report: not with "
                "--write-threshold, --by-source or --quantized"
            )
        from pruner_model.core.configuration import POINT_NAME_MAX_CHARS, is_point_name

        if not is_point_name(name):
            raise ValueError(
                f"--write-operating-point needs a name of 1-{POINT_NAME_MAX_CHARS} characters, got {name!r}"
            )
    if args.slice is not None:  # the slice is built from the selected groups: evaluate all of it
        return {"baselines": baselines, "budgets": budgets}
    return {
        "baselines": baselines,
        "budgets": budgets,
        "max_groups": args.max_groups or None,
        "start": args.start,
    }


def _read_records(args) -> list[dict]:
    """The labeled records, as a shifted slice of the selected groups with ``--slice``."""
    from pruner_model.core.records import read_jsonl, validate_labeled

    records = [
        validate_labeled(r, f"{path}:{i}") for path in args.data for i, r in enumerate(read_jsonl(path), 1)
    ]
    if args.slice is None:
        return records
    from pruner_model.evaluation.groups import group_of, range_ids
    from pruner_model.evaluation.shifts import build_shift

    stop = None if not args.max_groups else args.start + args.max_groups
    keep = range_ids((group_of(r) for r in records), args.seed, args.start, stop)
    return build_shift(args.slice, records, args.seed, keep)


def _write_report(args, pruner, report: dict) -> Path:
    """report.json (with the encoder and machine), report.md and curve.png; one line on stderr."""
    from pruner_model.core.precision import machine_info
    from pruner_model.core.records import write_json
    from pruner_model.evaluation.report import plot_curves, write_markdown

    report["encoder"] = {
        "backend": pruner.backend.name,
        "precision": pruner.precision,
        "machine": machine_info(getattr(pruner.backend, "device", "cpu")).to_dict(),
    }
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "report.json", report)
    write_markdown(report, out / "report.md")
    plot_curves(report, out / "curve.png")
    op = report["operating_point"]
    sure = "" if args.confidence is None else f" with confidence {args.confidence}"
    print(
        f"recommended threshold {report['recommended_threshold']:.4f} for evidence ≥ {args.target_evidence}"
        f"{sure}: evidence preserved {op['evidence_preserved']:.3f}, compression {op['compression']:.3f} "
        f"(report in {out})",
        file=sys.stderr,
    )
    return out


def _by_source(args, pruner, records: list[dict]) -> int:
    """`--by-source`: the per-source tables, written and printed."""
    from pruner_model.core.records import write_json
    from pruner_model.evaluation.sources import evaluate_sources, sources_markdown

    if args.slice is not None:
        raise ValueError("--by-source reports the records as they are: leave out --slice")
    by_source = evaluate_sources(
        pruner, records, args.max_groups or None, args.start, args.seed, progress=True
    )
    if not by_source:
        raise ValueError("no groups to evaluate")
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "data": args.data,
        "start": args.start,
        "max_groups": args.max_groups or None,
        "checkpoint_threshold": float(pruner.config.threshold),
        "sources": by_source,
    }
    write_json(out / "sources.json", report)
    text = sources_markdown(by_source)
    (out / "sources.md").write_text(text, encoding="utf-8")
    print(text)
    return 0
