"""Export a pruner checkpoint to ONNX (one graph: encoder + both heads) and validate it.

The export folder holds ``model.onnx`` (and ``model.int8.onnx`` with dynamic int8 quantization,
per-channel weight scales),
the checkpoint's ``config.json`` and tokenizer files, and ``export_report.json`` with the
validation numbers: the max absolute difference of token probabilities against torch on fixed
inputs (must be <= 1e-4 for fp32) and, for int8, the share of sentences whose keep/drop decision
agrees with fp32 (must be >= 0.98).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
from pruner_model.core.configuration import save_config
from pruner_model.core.records import atomic_path, current_umask
from pruner_model.core.scoring import pad_rows, pad_value

# encoder families whose attention/LayerNorm/GELU subgraphs onnxruntime's transformer optimizer
# fuses (the "bert" fusions match BERT-like encoders exported with eager attention)
FUSABLE_MODEL_TYPES = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "electra": "bert"}
FP32_TOLERANCE = 1e-4  # max |p_onnx - p_torch| over token probabilities
INT8_MIN_AGREEMENT = 0.98  # share of sentences with the same keep/drop decision as fp32

VALIDATION_QUERIES = [
    "When was the tower built?",
    "Who designed the statue's metal framework?",
    "How many visitors did the museum have?",
    "What is the river's name?",
]
VALIDATION_PASSAGES = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris. It was built from 1887 to 1889 by the "
    "company of Gustave Eiffel. It was the centrepiece of the 1889 World's Fair.",
    "The Statue of Liberty stands on Liberty Island. Its metal framework was built by Gustave Eiffel. "
    "It was dedicated in 1886.",
    "The Louvre had 8.7 million visitors in 2023. It is located on the Right Bank of the Seine.",
    "Berlin lies on the banks of the Spree. The river flows into the Havel. " * 12,
]


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


def sample_inputs(tokenizer, config, queries=None, passages=None) -> dict[str, np.ndarray]:
    """A padded batch of windows from fixed (query, passage) pairs of varied length."""
    from pruner_model import encode_pairs

    queries = queries or VALIDATION_QUERIES
    passages = passages or VALIDATION_PASSAGES
    w = encode_pairs(tokenizer, queries, passages, config.max_length, config.stride, config.max_query_length)
    pad = tokenizer.pad_token_id or 0
    return {name: pad_rows(rows, pad_value(name, pad)) for name, rows in w.features.items()}


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


# over 60 lines: mostly the staging-and-swap guard around one call and its two one-line failures
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
    if output_dir.exists() and (
        not output_dir.is_dir()
        or (any(output_dir.iterdir()) and not any((output_dir / f).is_file() for f in EXPORT_FILES))
    ):
        raise ExportError(
            f"{output_dir} exists and is not an ONNX export folder: choose a new or empty --output"
        )
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
            f"int8 keep/drop agreement {report['int8_agreement']:.3f} < {INT8_MIN_AGREEMENT}"
        )
        raise ExportError(
            f"{why}: int8 file not kept; the fp32 export in {output_dir} is valid (serve it without --quantized)"
        )
    return report


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


# over 60 lines: export, fuse, save, quantize, validate: one linear sequence of the export's steps
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
    from pruner_model.core.records import write_json
    from transformers import AutoTokenizer

    from pruner_model import PrunerModel

    model = PrunerModel.from_pretrained(str(model_dir)).eval()
    if fuse:
        _eager_attention(model)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    input_names = list(tokenizer.model_input_names)
    batch = sample_inputs(tokenizer, model.config)
    args = tuple(torch.from_numpy(batch[n]) for n in input_names)
    onnx_path = output_dir / "model.onnx"
    dyn = {n: {0: "batch", 1: "sequence"} for n in input_names}
    dyn.update(token_logits={0: "batch", 1: "sequence"}, relevance_logits={0: "batch"})
    report: dict = {"opset": opset, "inputs": input_names, "files": ["model.onnx"]}
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
    report.update(fuse_graph(onnx_path, model.config.encoder_config) if fuse else {"fused": False})
    model.config.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    if quantize == "int8":
        quantize_int8(onnx_path, output_dir / "model.int8.onnx")
        report["files"].append("model.int8.onnx")
        report["int8_per_channel"] = True
    if validate:
        with_agreement = quantize == "int8" and calibration_records is None
        report.update(validate_export(model, tokenizer, output_dir, with_agreement))
        if quantize == "int8" and calibration_records is not None and report["fp32_ok"]:
            report.update(
                calibrate_int8(output_dir, tokenizer, model.config, calibration_records, calibration_groups)
            )
    if validate and quantize == "int8" and report["fp32_ok"] and not report["int8_ok"]:
        # an int8 file that failed its check is not left where a server would load it
        (output_dir / "model.int8.onnx").unlink(missing_ok=True)
        report["files"].remove("model.int8.onnx")
    write_json(output_dir / "export_report.json", report)
    return report


def quantize_int8(fp32_path: Path, int8_path: Path, per_channel: bool = True, **options) -> None:
    """Dynamic int8 quantization of an exported graph (int8 weights, activations quantized at run
    time); ``options`` go to ``onnxruntime.quantization.quantize_dynamic`` (``nodes_to_exclude``, ...).

    ``per_channel``: one weight scale per output channel, which keeps int8's keep/drop decisions
    closer to fp32's where a ranking-trained model decides at small probabilities, at about the
    same speed (measured with ``experiments/int8_variants.py``: docs/experiments/results-log.md)."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(fp32_path),
        str(int8_path),
        weight_type=QuantType.QInt8,
        per_channel=per_channel,
        # fused contrib ops (com.microsoft) defeat shape inference: their outputs are float
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
        **options,
    )


def keep_decisions(pruner, items) -> np.ndarray:
    """Keep/drop decision of every sentence of ``pruner.prune_batch(items)``, in order (no dedup)."""
    return np.array(
        [s.kept for r in pruner.prune_batch(items, dedup=False) for p in r.passages for s in p.sentences],
        dtype=bool,
    )


def validate_export(model, tokenizer, output_dir: Path, with_int8: bool) -> dict:
    """Score the validation pairs through the one scoring path with torch and with the exported
    graph; token probabilities and passage relevance must agree within ``FP32_TOLERANCE``."""
    from pruner_model.core.alignment import unit_bounds
    from pruner_model.core.scoring import score_pairs
    from pruner_model.inference.onnx_backend import OnnxBackend

    from pruner_model import segment

    ort = OnnxBackend.from_pretrained(output_dir, device="cpu")
    queries = [q for q in VALIDATION_QUERIES for _ in VALIDATION_PASSAGES]
    texts = VALIDATION_PASSAGES * len(VALIDATION_QUERIES)
    bounds = [unit_bounds(segment(t)) for t in texts]
    scored = [
        score_pairs(forward, tokenizer, model.config, queries, texts, bounds, ort.input_names)
        for forward in (model.predict, ort)
    ]
    token_diff = max(float(np.abs(a - b).max()) for a, b in zip(scored[0].token_probs, scored[1].token_probs))
    rel_diff = max(abs(a.relevance - b.relevance) for a, b in zip(scored[0].pairs, scored[1].pairs))
    diff = max(token_diff, rel_diff)
    report = {"fp32_max_abs_diff": diff, "fp32_tolerance": FP32_TOLERANCE, "fp32_ok": diff <= FP32_TOLERANCE}
    if with_int8:
        report.update(int8_agreement(output_dir, tokenizer, model.config))
    return report


INT8_MAX_EVIDENCE_LOSS = 0.005  # int8 at its own threshold vs fp32 at the checkpoint's
INT8_MAX_COMPRESSION_LOSS = 0.01


def calibrate_int8(output_dir: Path, tokenizer, config, records: list[dict], groups: int = 1000) -> dict:
    """Give the int8 graph its own threshold and judge it on labeled data.

    fp32 (the exported graph) at the checkpoint's threshold keeps evidence E with compression C on
    ``groups`` labeled groups; the int8 threshold is the highest that keeps at least E there
    (same relative floor and relevance exponent). int8 passes when, each at its own threshold, it
    keeps evidence within 0.5 point and compression within 1 point of fp32. The threshold is
    stored as ``int8_threshold`` in the export's config, which ``--quantized`` loading uses.
    """
    from pruner_model.evaluation.calibration import calibrate_threshold
    from pruner_model.evaluation.evaluator import with_score_rules
    from pruner_model.evaluation.groups import load_range
    from pruner_model.evaluation.metrics import metrics_at
    from pruner_model.evaluation.scorer import score_groups
    from pruner_model.inference.onnx_backend import OnnxBackend
    from pruner_model.inference.pruner import ContextPruner

    from pruner_model import PrunerConfig

    labeled = load_range(records, 0, 0, groups, config.segmenter_language, config.segmenter_structure)
    if not any(g.has_evidence for g in labeled):
        raise ValueError("int8 calibration data has no group with evidence")
    floor = config.relative_floor
    out = {}
    for name, quantized in (("fp32", False), ("int8", True)):
        pruner = ContextPruner(
            OnnxBackend.from_pretrained(output_dir, device="cpu", quantized=quantized), tokenizer, config
        )
        raw = score_groups(pruner, labeled).groups
        out[name] = with_score_rules(raw, config.relevance_exponent, floor, config.relevance_contrast)
    fp32 = metrics_at(out["fp32"], config.threshold)
    t8 = calibrate_threshold(out["int8"], fp32["evidence_preserved"])
    int8 = metrics_at(out["int8"], t8)
    d_evidence = fp32["evidence_preserved"] - int8["evidence_preserved"]
    d_compression = fp32["compression"] - int8["compression"]
    ok = d_evidence <= INT8_MAX_EVIDENCE_LOSS and d_compression <= INT8_MAX_COMPRESSION_LOSS
    report = {
        "int8_calibration_groups": len(labeled),
        "int8_threshold": t8,
        "fp32_evidence": fp32["evidence_preserved"],
        "fp32_compression": fp32["compression"],
        "int8_evidence": int8["evidence_preserved"],
        "int8_compression": int8["compression"],
        "int8_ok": ok,
    }
    if ok:
        cfg = PrunerConfig.from_pretrained(str(output_dir))
        cfg.int8_threshold = t8
        save_config(cfg, output_dir)
    else:
        report["int8_refused"] = (
            f"int8 at its own threshold keeps evidence {int8['evidence_preserved']:.3f} / compression "
            f"{int8['compression']:.3f} against fp32's {fp32['evidence_preserved']:.3f} / {fp32['compression']:.3f} "
            f"(allowed: {INT8_MAX_EVIDENCE_LOSS * 100:.1f} / {INT8_MAX_COMPRESSION_LOSS * 100:.0f} points less)"
        )
    return report


def int8_agreement(output_dir: Path, tokenizer, config, items=None) -> dict:
    """Share of sentences whose keep/drop decision under int8 equals fp32's, on sample items."""
    from pruner_model.inference.onnx_backend import OnnxBackend
    from pruner_model.inference.pruner import ContextPruner

    if items is None:
        items = [(q, VALIDATION_PASSAGES) for q in VALIDATION_QUERIES]
    fp32 = ContextPruner(OnnxBackend.from_pretrained(output_dir, device="cpu"), tokenizer, config)
    int8 = ContextPruner(
        OnnxBackend.from_pretrained(output_dir, device="cpu", quantized=True), tokenizer, config
    )
    a, b = keep_decisions(fp32, items), keep_decisions(int8, items)
    agree = float(np.mean(a == b)) if a.size else 1.0
    return {
        "int8_agreement": agree,
        "int8_sentences": len(a),
        "int8_min_agreement": INT8_MIN_AGREEMENT,
        "int8_ok": agree >= INT8_MIN_AGREEMENT,
    }
