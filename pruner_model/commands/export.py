"""`pruner export`: a checkpoint to ONNX (fp32, optionally int8), validated."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pruner_model.commands.common import DEFAULT_MODEL_HELP, existing_model_dir


def _export_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner export",
        description="Export a checkpoint folder to ONNX (encoder + both heads, dynamic batch and sequence "
        "axes). Writes OUTPUT/model.onnx (+ model.int8.onnx with --quantize int8), config.json, tokenizer "
        "files and export_report.json; fails if the export does not match torch within tolerance.",
    )
    p.add_argument("--model", default=None, help=f"checkpoint folder {DEFAULT_MODEL_HELP}")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--output", help="export folder")
    where.add_argument(
        "--cache",
        action="store_true",
        help="write it where loading the checkpoint with no flags finds it (PRUNER_CACHE, default "
        "~/.cache/pruner_model, by a digest of the weights and config): on a CPU without native bf16 "
        "or with int8 dot products (VNNI) and no AMX, "
        "ContextPruner.from_pretrained(MODEL), pruner prune and pruner serve run its validated int8 graph "
        "(the first such load builds it by itself; this builds it ahead of time)",
    )
    p.add_argument("--quantize", choices=["int8"], default=None, help="also write a dynamic int8 model")
    p.add_argument(
        "--calibration-data",
        default=None,
        metavar="LABELED.jsonl",
        help="with --quantize int8: calibrate the int8 model's own threshold on these labeled records and "
        "keep it only if, each at its own threshold, it keeps fp32's evidence within 0.5 point and its "
        "compression within 1 point (default: keep/drop agreement on fixed sentences)",
    )
    p.add_argument("--calibration-groups", type=int, default=1000, help="groups of --calibration-data used")
    p.add_argument("--opset", type=int, default=17)
    p.add_argument("--no-validate", action="store_true", help="skip the comparison with torch")
    p.add_argument(
        "--no-fuse",
        action="store_true",
        help="skip onnxruntime's transformer fusions (Attention, LayerNorm, GELU) before quantizing",
    )
    return p


def export_main(argv: list[str] | None = None) -> int:
    args = _export_parser().parse_args(argv)
    model_dir = existing_model_dir(args.model)
    if args.cache:
        from pruner_model.inference.loading import export_cache_dir

        if args.no_validate:
            raise ValueError("--cache keeps validated exports only: drop --no-validate")
        args.output = str(export_cache_dir(model_dir))
    calibration = None
    if args.calibration_data is not None:
        if args.quantize != "int8":
            raise ValueError("--calibration-data goes with --quantize int8")
        from pruner_model.core.records import read_jsonl, validate_labeled

        path = args.calibration_data
        calibration = [validate_labeled(r, f"{path}:{i}") for i, r in enumerate(read_jsonl(path), 1)]
    from pruner_model.export.onnx import export_onnx

    report = export_onnx(
        model_dir,
        args.output,
        opset=args.opset,
        quantize=args.quantize,
        calibration_records=calibration,
        calibration_groups=args.calibration_groups,
        validate=not args.no_validate,
        fuse=not args.no_fuse,
    )
    if args.no_validate:
        print(
            "warning: --no-validate: the export was not compared with torch"
            + (
                " and the int8 file is unchecked (its decisions may differ from fp32's)"
                if args.quantize
                else ""
            )
            + "; export_report.json says so",
            file=sys.stderr,
        )
    _say_checks(report)
    print(f"exported to {args.output}: {', '.join(report['files'])}", file=sys.stderr)
    if args.cache:
        from pruner_model.inference.int8_build import failure_file

        failure_file(Path(args.output)).unlink(missing_ok=True)  # no-flag loads use this export now
        print(f"cached: {_cache_use(report, model_dir)}", file=sys.stderr)
    return 0


def _say_checks(report: dict) -> None:
    """The export's checks, its int8 scheme and its fusions, a line each on stderr."""
    if "fp32_max_abs_diff" in report:
        line = f"fp32 max |Δp| vs torch {report['fp32_max_abs_diff']:.2e} (tolerance {report['fp32_tolerance']:.0e})"
        if "int8_agreement" in report:
            line += f"; int8 keep/drop agreement {report['int8_agreement']:.3f} on {report['int8_sentences']} sentences"
        if "int8_evidence" in report:
            t8 = report["int8_threshold"]
            at = "at the per-request default" if t8 is None else f"at its threshold {t8:.4f}"
            line += (
                f"; on {report['int8_calibration_groups']} labeled groups, fp32 {report['fp32_evidence']:.3f} / "
                f"{report['fp32_compression']:.3f}, int8 {at} "
                f"{report['int8_evidence']:.3f} / {report['int8_compression']:.3f} (evidence / compression)"
            )
        print(line, file=sys.stderr)
    if "model.int8.onnx" in report["files"]:
        scheme = report["int8_scheme"]
        how = {
            "smoothed": f"all int8 but the heads, smoothed on {report.get('int8_smoothed_on')}",
            "fp32 projections": "the feed-forward output projections and the heads kept in fp32",
            "fp32 feed-forward": "both feed-forward projections and the heads kept in fp32",
        }.get(scheme, scheme)
        print(f"int8 scheme: {how}", file=sys.stderr)
    if report.get("fused"):
        ops = ", ".join(f"{k} {v}" for k, v in report["fused_operators"].items())
        print(f"fused: {ops}", file=sys.stderr)
    elif report.get("fusion_skipped"):
        print(f"graph not fused ({report['fusion_skipped']})", file=sys.stderr)


def _cache_use(report: dict, model_dir) -> str:
    """What loading the checkpoint runs now that its export is cached."""
    from pruner_model.core.precision import cpu_prefers_int8

    if "model.int8.onnx" not in report["files"]:
        use = "no int8 graph in it: loading the checkpoint runs torch (export with --quantize int8)"
    elif not cpu_prefers_int8():
        use = "this CPU runs the checkpoint's bf16 by default; quantized=True (--quantized) runs this int8 graph"
    else:
        use = f"on this CPU, loading {model_dir} with no flags runs its int8 graph (--dtype fp32 for torch)"
    return use
