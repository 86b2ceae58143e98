"""Export a pruner checkpoint to ONNX: one graph (encoder + both heads, dynamic batch and sequence
axes), fused with onnxruntime's transformer optimizer, optionally quantized to int8
(:mod:`~pruner_model.export.quantize`) and validated (:mod:`~pruner_model.export.validate`).

The export folder holds ``model.onnx`` (and ``model.int8.onnx``), the checkpoint's
``config.json`` and tokenizer files, and ``export_report.json`` with the validation numbers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pruner_model.core.records import atomic_path, current_umask
from pruner_model.export.quantize import (
    calibrate_int8,
    quantize_int8,
    quantize_smoothed,
    smoothing_batches,
)
from pruner_model.export.validate import FP32_TOLERANCE, sample_inputs, validate_export

# encoder families whose attention/LayerNorm/GELU subgraphs onnxruntime's transformer optimizer
# fuses (the "bert" fusions match BERT-like encoders exported with eager attention)
FUSABLE_MODEL_TYPES = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "electra": "bert"}


class ExportError(RuntimeError):
    """The exported graph does not reproduce the torch model within tolerance."""


def _wrapper(model, input_names: list[str]):
    import torch

    class Graph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            out = self.model(**dict(zip(input_names, inputs)))
            return out.token_logits, out.relevance_logits

    return Graph().eval()


def fuse_graph(path: Path, encoder_config) -> dict:
    """Rewrite ``path`` in place with onnxruntime's transformer fusions (Attention,
    SkipLayerNormalization, EmbedLayerNormalization, BiasGelu), which make the int8 graph faster:
    a fused Attention quantizes as one op. Returns the fused-operator counts, or why nothing was
    fused; the graph is left as exported when the encoder family is not supported or fusion fails."""
    model_type = FUSABLE_MODEL_TYPES.get(getattr(encoder_config, "model_type", None))
    if model_type is None:
        return {"fused": False, "fusion_skipped": f"no fusions for model_type {encoder_config.model_type!r}"}
    import logging

    from onnxruntime.transformers import optimizer

    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    try:
        opt = optimizer.optimize_model(
            str(path),
            model_type=model_type,
            num_heads=encoder_config.num_attention_heads,
            hidden_size=encoder_config.hidden_size,
            opt_level=0,  # graph fusions only; onnxruntime applies its own level at load time
            use_gpu=False,
        )
    except Exception as exc:  # an unfamiliar graph: keep the plain export
        return {"fused": False, "fusion_skipped": f"{type(exc).__name__}: {exc}"[:300]}
    stats = {k: int(v) for k, v in opt.get_fused_operator_statistics().items() if v}
    if not stats.get("Attention"):
        return {"fused": False, "fusion_skipped": "attention did not fuse", "fused_operators": stats}
    with atomic_path(path) as tmp:
        opt.save_model_to_file(str(tmp))
    return {"fused": True, "fused_operators": stats}


def _eager_attention(model) -> None:
    """Export attention as plain ops (the pattern onnxruntime's fusions recognise) instead of SDPA."""
    try:
        model.encoder.set_attn_implementation("eager")
    except (AttributeError, ValueError):
        pass


EXPORT_FILES = ("model.onnx", "export_report.json")  # what marks a folder as an export of ours


def export_onnx(
    model_dir: str | Path,
    output_dir: str | Path,
    opset: int = 17,
    quantize: str | None = None,
    validate: bool = True,
    fuse: bool = True,
    calibration_records: list[dict] | None = None,
    calibration_groups: int = 1000,
) -> dict:
    """Export ``model_dir`` to ``output_dir``; returns (and writes) the validation report.

    ``fuse`` applies onnxruntime's transformer fusions to the graph before (optional) int8
    quantization. With ``calibration_records`` (labeled records), the int8 model gets its own
    threshold, calibrated on ``calibration_groups`` of them to keep the evidence fp32 keeps at its
    threshold, and is judged by what users get (:func:`calibrate_int8`) instead of the keep/drop
    agreement on fixed sentences.

    The folder is built beside ``output_dir`` and swapped in whole: no file of an earlier export
    survives (a stale ``model.int8.onnx`` would be served with the new config), and a failed
    export leaves the earlier one as it was. An existing ``output_dir`` that is not an export
    folder is refused, never replaced.

    Raises:
        ExportError: validation failed. fp32: nothing is replaced. int8: the export is published
            without the int8 file (the fp32 export stands).
    """
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    if not (model_dir / "model.safetensors").is_file():
        raise FileNotFoundError(f"no checkpoint (model.safetensors) in {model_dir}")
    if quantize not in (None, "int8"):
        raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
    _check_output(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.export-", dir=output_dir.parent))
    try:
        os.chmod(staging, 0o777 & ~current_umask())  # mkdtemp makes it private; a folder's usual mode
        report = _export_into(
            model_dir, staging, opset, quantize, validate, fuse, calibration_records, calibration_groups
        )
        if validate and not report["fp32_ok"]:
            raise ExportError(
                f"ONNX fp32 differs from torch by {report['fp32_max_abs_diff']:.2e} > {FP32_TOLERANCE}; "
                f"{output_dir} not changed"
            )
        _swap_in(staging, output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if validate and quantize == "int8" and not report["int8_ok"]:
        why = report.get("int8_refused") or (
            f"int8 keep/drop agreement {report['int8_agreement']:.3f} < {report['int8_min_agreement']}"
        )
        raise ExportError(
            f"{why}: int8 file not kept; the fp32 export in {output_dir} is valid (serve it without --quantized)"
        )
    return report


def _check_output(output_dir: Path) -> None:
    """An existing ``output_dir`` must be an export of ours (or empty): nothing else is replaced."""
    if output_dir.exists() and (
        not output_dir.is_dir()
        or (any(output_dir.iterdir()) and not any((output_dir / f).is_file() for f in EXPORT_FILES))
    ):
        raise ExportError(
            f"{output_dir} exists and is not an ONNX export folder: choose a new or empty --output"
        )


INT8_SCHEMES = ("smoothed", "fp32 projections", "fp32 feed-forward")  # the order they are tried in


def _int8(output_dir: Path, tokenizer, config, check: bool, records, groups: int, model_dir: Path) -> dict:
    """``model.int8.onnx``, the first scheme of :data:`INT8_SCHEMES` that passes its check: with
    labeled ``records``, smoothed and all int8 (:mod:`~pruner_model.export.smoothing`) and judged
    on them (:func:`calibrate_int8`), the maxima it smoothed with written beside it when it passes;
    without labels, smoothed with the maxima the checkpoint carries, if any; then with each layer's
    feed-forward output projection and the heads in fp32; then with both feed-forward projections
    in fp32 (a deeper encoder whose LayerNorm outliers flip decisions: faster than fp32 by less,
    docs/serving.md). Without labels the schemes are judged by the keep/drop agreement on the
    validation sentences."""
    from pruner_model.export.smoothing import MAXIMA_FILE, save_maxima, smoothing_text, stored_maxima
    from pruner_model.export.validate import int8_agreement

    onnx_path, int8_path = output_dir / "model.onnx", output_dir / "model.int8.onnx"
    text = smoothing_text(records, config, groups)
    stored = None if text else stored_maxima(model_dir, onnx_path)
    schemes = [s for s in INT8_SCHEMES if s != "smoothed" or text or stored]
    amax = None
    for k, scheme in enumerate(schemes):
        out = {"int8_per_channel": True, "int8_scheme": scheme, "int8_tried": schemes[: k + 1]}
        if scheme == "smoothed" and text:
            groups_, source = text
            kept, amax = quantize_smoothed(
                onnx_path, int8_path, smoothing_batches(tokenizer, config, groups_)
            )
            out.update(int8_smoothed_on=f"{len(groups_)} groups of {source}", int8_fp32_nodes=kept)
        elif scheme == "smoothed":
            kept, _ = quantize_smoothed(onnx_path, int8_path, amax=stored[0])
            out.update(
                int8_smoothed_on=f"the checkpoint's {MAXIMA_FILE}, measured on {stored[1]}",
                int8_fp32_nodes=kept,
            )
        else:
            feed_forward = scheme == "fp32 feed-forward"
            out["int8_fp32_nodes"] = quantize_int8(onnx_path, int8_path, feed_forward=feed_forward)
        if not check:
            break
        out.update(
            int8_agreement(output_dir, tokenizer, config)
            if records is None
            else calibrate_int8(output_dir, tokenizer, config, records, groups)
        )
        if out["int8_ok"]:
            break
    if out["int8_scheme"] == "smoothed" and amax is not None and out.get("int8_ok", True):
        # the maxima that passed, for a checkpoint to carry (then exported without labels)
        save_maxima(amax, onnx_path, output_dir / MAXIMA_FILE, out["int8_smoothed_on"])
        out["int8_smoothing_file"] = MAXIMA_FILE
    return out


def _trace(model, input_names: list[str], args: tuple, onnx_path: Path, opset: int) -> None:
    """The graph (TorchScript exporter) with dynamic batch and sequence axes."""
    import torch

    dyn = {n: {0: "batch", 1: "sequence"} for n in input_names}
    dyn.update(token_logits={0: "batch", 1: "sequence"}, relevance_logits={0: "batch"})
    with torch.no_grad():
        torch.onnx.export(
            _wrapper(model, input_names),
            args,
            str(onnx_path),
            input_names=input_names,
            output_names=["token_logits", "relevance_logits"],
            dynamic_axes=dyn,
            opset_version=opset,
            dynamo=False,
            do_constant_folding=True,
        )


def _swap_in(staging: Path, output_dir: Path) -> None:
    """Replace ``output_dir`` (if any) by ``staging`` with two renames on one file system."""
    old = None
    if output_dir.exists():
        old = output_dir.with_name(f".{output_dir.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(output_dir, old)
    os.replace(staging, output_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _export_into(
    model_dir: Path,
    output_dir: Path,
    opset: int,
    quantize: str | None,
    validate: bool,
    fuse: bool,
    calibration_records: list[dict] | None,
    calibration_groups: int,
) -> dict:
    """Write the export into the (empty, staging) ``output_dir``; returns the report, which says
    whether validation passed (``fp32_ok``, ``int8_ok``). A failed int8 file is removed."""
    import torch
    from pruner_model.core.modeling import PrunerModel
    from pruner_model.core.records import write_json
    from transformers import AutoTokenizer

    model = PrunerModel.from_pretrained(str(model_dir)).eval()
    if fuse:
        _eager_attention(model)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    input_names = list(tokenizer.model_input_names)
    batch = sample_inputs(tokenizer, model.config)
    args = tuple(torch.from_numpy(batch[n]) for n in input_names)
    onnx_path = output_dir / "model.onnx"
    report: dict = {"opset": opset, "inputs": input_names, "files": ["model.onnx"]}
    _trace(model, input_names, args, onnx_path, opset)
    report.update(fuse_graph(onnx_path, model.config.encoder_config) if fuse else {"fused": False})
    model.config.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    if validate:
        report.update(validate_export(model, tokenizer, output_dir))
    if quantize == "int8":
        report["files"].append("model.int8.onnx")
        check = validate and report["fp32_ok"]
        labels = (calibration_records, calibration_groups)
        report.update(_int8(output_dir, tokenizer, model.config, check, *labels, model_dir))
    if validate and quantize == "int8" and report["fp32_ok"] and not report["int8_ok"]:
        # an int8 file that failed its check is not left where a server would load it
        (output_dir / "model.int8.onnx").unlink(missing_ok=True)
        report["files"].remove("model.int8.onnx")
    if not validate:  # said in the report, so that a served unchecked int8 file can be told apart
        report["validated"] = False
    write_json(output_dir / "export_report.json", report)
    return report
