"""`pruner calibrate`: a checkpoint's default threshold calibrated on a labeled sample of the
user's own text, the short path to the compression that text allows."""

from __future__ import annotations

import argparse
import sys

from pruner_model.commands.common import add_precision_argument, existing_model_dir, load_pruner


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner calibrate",
        description="Calibrate a checkpoint's threshold on labeled records of your own text (JSONL, as "
        "`pruner annotate` or `pruner data squad --file` write them): the highest threshold that keeps "
        "--target-evidence of the questions' answers there becomes the checkpoint's default (it replaces "
        "the per-request threshold), or, with --name, a named operating point. Prints what the sample "
        "keeps and compresses at the checkpoint's default before and at the new threshold.",
    )
    p.add_argument("--model", required=True, help="checkpoint folder (its config.json is rewritten)")
    p.add_argument(
        "--data", required=True, nargs="+", help="labeled records (JSONL); several are read as one"
    )
    p.add_argument(
        "--target-evidence",
        type=float,
        default=None,
        help="share of questions that keep all their evidence (default: the checkpoint's promise)",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=0.8,
        help="keep the target on new questions with this confidence (an exact binomial bound on the "
        "sample, 0.5-1; default 0.8), not only on the sample itself",
    )
    p.add_argument("--max-groups", type=int, default=0, help="use N query groups of the sample (0 = all)")
    p.add_argument("--seed", type=int, default=0, help="permutation seed of --max-groups")
    p.add_argument(
        "--name", metavar="NAME", help="write a named operating point instead of the default threshold"
    )
    p.add_argument("--dry-run", action="store_true", help="print the numbers, write nothing")
    p.add_argument("--backend", choices=["auto", "torch", "onnx"], default="auto")
    add_precision_argument(p)
    return p


def calibrate_main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from pruner_model.core.configuration import POINT_NAME_MAX_CHARS, is_point_name
    from pruner_model.evaluation.statistics import check_confidence

    if args.target_evidence is not None and not 0 < args.target_evidence <= 1:
        raise ValueError("--target-evidence must be in (0, 1]")
    try:
        check_confidence(args.confidence)
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
    if args.max_groups < 0:
        raise ValueError("--max-groups must be >= 0")
    if args.name is not None and not is_point_name(args.name):
        raise ValueError(f"--name needs 1-{POINT_NAME_MAX_CHARS} characters, got {args.name!r}")
    model_dir = existing_model_dir(args.model)
    from pruner_model.core.default_model import default_model_path

    if not args.dry_run and model_dir.resolve() == default_model_path().resolve():
        raise ValueError(
            f"{model_dir} is the package's default model: copy it first (cp -r {model_dir} runs/mine) "
            "and calibrate the copy"
        )
    from pruner_model.core.records import read_jsonl, validate_labeled

    records = [
        validate_labeled(r, f"{path}:{i}") for path in args.data for i, r in enumerate(read_jsonl(path), 1)
    ]
    pruner = load_pruner(model_dir, args)
    if pruner.precision == "int8":
        raise ValueError("calibrate a full-precision model (an int8 file keeps its own threshold)")
    result = measure(
        pruner, records, args.target_evidence, args.confidence, args.max_groups or None, args.seed
    )
    print(summary(result, args), file=sys.stderr)
    if args.dry_run:
        return 0
    from pruner_model.commands.evaluate import _write_operating_point, _write_threshold

    if args.name:
        _write_operating_point(model_dir, args.name, result["threshold"])
    else:
        _write_threshold(model_dir, pruner, result["threshold"], result["target"])
    return 0


def measure(pruner, records: list[dict], target, confidence, max_groups, seed: int) -> dict:
    """The sample's groups at the checkpoint's default and at the threshold calibrated on them."""
    from pruner_model.evaluation.calibration import calibrate_threshold
    from pruner_model.evaluation.groups import load_range
    from pruner_model.evaluation.sources import at_threshold, score_at_default

    cfg = pruner.config
    target = float(target if target is not None else (cfg.target_evidence or 0.95))
    groups = load_range(records, seed, 0, max_groups, cfg.segmenter_language, cfg.segmenter_structure)
    if not groups:
        raise ValueError("no query groups in the data")
    _, ruled, default = score_at_default(pruner, groups, progress=True)
    if not any(g.has_evidence for g in ruled):
        raise ValueError("no group of the data has an answer sentence: nothing to calibrate on")
    threshold = float(calibrate_threshold(ruled, target, confidence))
    return {
        "groups": len(groups),
        "with_evidence": sum(g.has_evidence for g in ruled),
        "target": target,
        "per_request": not isinstance(default, float),
        "before": at_threshold(ruled, default, target),
        "threshold": threshold,
        "after": at_threshold(ruled, threshold, target),
    }


def summary(r: dict, args) -> str:
    def line(m):
        return f"kept {m['evidence_preserved']:.3f} of answers, compression {m['compression']:.3f}"

    default = "per-request threshold" if r["per_request"] else "threshold"
    return (
        f"{r['groups']} groups ({r['with_evidence']} with an answer), target {r['target']} with confidence "
        f"{args.confidence}:\n  the checkpoint's default ({default}): {line(r['before'])}\n"
        f"  threshold {r['threshold']:.4f} calibrated here: {line(r['after'])}"
    )
