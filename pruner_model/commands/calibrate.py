"""`pruner calibrate`: a checkpoint's default threshold calibrated on a labeled sample of the
user's own text, the short path to the compression that text allows."""

from __future__ import annotations

import argparse
import sys

from pruner_model.commands.common import add_precision_argument, existing_model_dir, load_pruner
from pruner_model.evaluation.sources import measure_sample


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
    from pruner_model.inference.loading import is_onnx_folder

    # a checkpoint is measured in torch even where its int8 export is cached; an ONNX folder as served
    full = {} if is_onnx_folder(model_dir) else {"quantized": False}
    pruner = load_pruner(model_dir, args, **full)
    if pruner.precision == "int8":
        raise ValueError("calibrate a full-precision model (an int8 file keeps its own threshold)")
    result = measure_sample(
        pruner, records, args.target_evidence, args.confidence, args.max_groups or None, args.seed
    )
    print(summary(result, args), file=sys.stderr)
    if args.dry_run:
        return 0
    from pruner_model.evaluation.calibrate import write_operating_point, write_threshold

    if args.name:
        write_operating_point(model_dir, args.name, result["threshold"])
    else:
        write_threshold(model_dir, pruner, result["threshold"], result["target"])
    return 0


def summary(r: dict, args) -> str:
    def line(m):
        return f"kept {m['evidence_preserved']:.3f} of answers, compression {m['compression']:.3f}"

    default = "per-request threshold" if r["per_request"] else "threshold"
    return (
        f"{r['groups']} groups ({r['with_evidence']} with an answer), target {r['target']} with confidence "
        f"{args.confidence}:\n  the checkpoint's default ({default}): {line(r['before'])}\n"
        f"  threshold {r['threshold']:.4f} calibrated here: {line(r['after'])}"
    )
