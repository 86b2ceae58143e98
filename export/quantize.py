"""int8 quantization of an exported graph, and the int8 graph's own threshold: calibrated on
labeled data to keep the evidence fp32 keeps at the checkpoint's threshold, and judged by what
users get at it (evidence and compression against fp32's)."""

from __future__ import annotations

from pathlib import Path

from pruner_model.export.smoothing import is_projection

INT8_MAX_EVIDENCE_LOSS = 0.005  # int8 at its own threshold vs fp32 at the checkpoint's
INT8_MAX_COMPRESSION_LOSS = 0.01


def sensitive_nodes(fp32_path: Path, feed_forward: bool = False) -> list[str]:
    """The MatMuls int8 would hurt most, kept in fp32: each layer's feed-forward output projection
    (its input, the GELU output, has the outlier channels a per-tensor activation scale cannot
    hold) and the two heads (the scores thresholds compare). ``feed_forward``: each layer's
    feed-forward input projection too (it reads the LayerNorm output, whose outliers hurt a
    12-layer encoder's decisions: docs/experiments/results-log.md). Found by name in the exported
    graph (BERT-like encoders: ``layer.N/output/dense``, ``layer.N/intermediate/dense``); none
    when the names do not match."""
    import onnx

    graph = onnx.load(str(fp32_path), load_external_data=False).graph
    names = [
        n.name
        for n in graph.node
        if n.op_type in ("MatMul", "Gemm")
        and ("_head/" in n.name or is_projection(n.name) or (feed_forward and is_feed_forward_input(n.name)))
    ]
    # the quantizer first splits a Gemm into "<name>_MatMul" + Add: that MatMul stays fp32 too
    return names + [f"{n.name}_MatMul" for n in graph.node if n.op_type == "Gemm" and n.name in names]


def is_feed_forward_input(name: str) -> bool:
    """A feed-forward input projection's node, by its name (BERT-like: ``layer.N/intermediate/dense``)."""
    return "/intermediate/dense/" in name


def head_nodes(fp32_path: Path) -> list[str]:
    """The heads' nodes of :func:`sensitive_nodes`: kept fp32 in every int8 graph."""
    return [n for n in sensitive_nodes(fp32_path) if "_head/" in n]


def smoothing_batches(tokenizer, config, groups) -> list[dict]:
    """Padded windows of the validation pairs and of ``groups`` (labeled groups), for the
    channel maxima of :func:`quantize_smoothed`."""
    from pruner_model.export.validate import sample_inputs

    batches = [sample_inputs(tokenizer, config)]
    for g in groups:
        passages = [p["text"] for p in g.passages]
        batches.append(sample_inputs(tokenizer, config, queries=[g.query] * len(passages), passages=passages))
    return batches


def quantize_smoothed(
    fp32_path: Path, int8_path: Path, batches: list[dict] | None = None, amax: dict | None = None
) -> tuple[list[str], dict]:
    """Smoothed (:func:`pruner_model.export.smoothing.smoothed_graph`, with the channel maxima
    ``amax`` or those measured over ``batches``), then dynamic per-channel int8 of everything but
    the heads; returns the nodes left in fp32 and the maxima used. The smoothed fp32 graph is an
    intermediate: only the int8 file is written beside ``fp32_path``."""
    import tempfile

    from pruner_model.export.smoothing import smoothed_graph

    with tempfile.TemporaryDirectory(dir=int8_path.parent) as tmp:
        smoothed = Path(tmp) / "model.smoothed.onnx"
        amax = smoothed_graph(fp32_path, smoothed, batches, amax=amax)
        kept = quantize_int8(
            smoothed, int8_path, keep_sensitive=False, nodes_to_exclude=head_nodes(fp32_path)
        )
    return kept, amax


def quantize_int8(
    fp32_path: Path,
    int8_path: Path,
    per_channel: bool = True,
    keep_sensitive: bool = True,
    feed_forward: bool = False,
    **options,
) -> list[str]:
    """Dynamic int8 quantization of an exported graph (int8 weights, activations quantized at run
    time); ``options`` go to ``onnxruntime.quantization.quantize_dynamic`` (``nodes_to_exclude``, ...).
    Returns the nodes left in fp32.

    ``per_channel``: one weight scale per output channel. ``keep_sensitive``: the nodes of
    :func:`sensitive_nodes` stay in fp32 (``feed_forward``: both feed-forward projections of every
    layer). Both keep int8's keep/drop decisions close to fp32's where a ranking-trained model
    decides at small probabilities (measured with ``experiments/int8_variants.py``:
    docs/experiments/results-log.md)."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if keep_sensitive:
        kept = sensitive_nodes(fp32_path, feed_forward)
        options["nodes_to_exclude"] = [*options.get("nodes_to_exclude", ()), *kept]
    quantize_dynamic(
        str(fp32_path),
        str(int8_path),
        weight_type=QuantType.QInt8,
        per_channel=per_channel,
        # fused contrib ops (com.microsoft) defeat shape inference: their outputs are float
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
        **options,
    )
    return list(options.get("nodes_to_exclude", ()))


def calibrate_int8(output_dir: Path, tokenizer, config, records: list[dict], groups: int = 1000) -> dict:
    """Judge the int8 graph on labeled data by what users get, and give it its own threshold
    where the checkpoint has one threshold.

    With a per-request threshold (``threshold_model``), fp32 and int8 are both measured at it
    (each request's band from its own scores) and int8 keeps the bands. Otherwise fp32 at the
    checkpoint's threshold keeps evidence E on ``groups`` labeled groups, and the int8 threshold
    is the highest that keeps at least E there (same score rule), stored as ``int8_threshold``
    (which ``--quantized`` loading uses). int8 passes when it keeps evidence within 0.5 point and
    compression within 1 point of fp32.
    """
    from pruner_model.evaluation.calibrate import Calibration
    from pruner_model.evaluation.calibration import calibrate_threshold
    from pruner_model.evaluation.groups import load_range
    from pruner_model.evaluation.metrics import metrics_at
    from pruner_model.evaluation.sources import score_at_default
    from pruner_model.inference.onnx_backend import OnnxBackend
    from pruner_model.inference.pruner import ContextPruner

    labeled = load_range(records, 0, 0, groups, config.segmenter_language, config.segmenter_structure)
    if not any(g.has_evidence for g in labeled):
        raise ValueError("int8 calibration data has no group with evidence")
    m, t8 = {}, None
    for name, quantized in (("fp32", False), ("int8", True)):
        backend = OnnxBackend.from_pretrained(output_dir, device="cpu", quantized=quantized)
        _, scored, default = score_at_default(ContextPruner(backend, tokenizer, config), labeled)
        if not isinstance(default, float):  # the per-request default, each request banded by its own scores
            m[name] = metrics_at(scored, float("nan"), default.masks(scored))
        elif name == "fp32":
            m[name] = metrics_at(scored, default)
        else:
            t8 = calibrate_threshold(scored, m["fp32"]["evidence_preserved"])
            m[name] = metrics_at(scored, t8)
    report = _judged(m["fp32"], m["int8"], len(labeled), t8)
    if report["int8_ok"] and t8 is not None:
        Calibration(int8_threshold=t8).save(output_dir)
    return report


def _judged(fp32: dict, int8: dict, groups: int, t8: float | None) -> dict:
    """The int8 check's report: both graphs' evidence and compression, and the verdict."""
    d_evidence = fp32["evidence_preserved"] - int8["evidence_preserved"]
    d_compression = fp32["compression"] - int8["compression"]
    ok = d_evidence <= INT8_MAX_EVIDENCE_LOSS and d_compression <= INT8_MAX_COMPRESSION_LOSS
    report = {
        "int8_calibration_groups": groups,
        "int8_threshold": t8,
        "int8_judged_at": "the per-request default" if t8 is None else "its own threshold",
        "fp32_evidence": fp32["evidence_preserved"],
        "fp32_compression": fp32["compression"],
        "int8_evidence": int8["evidence_preserved"],
        "int8_compression": int8["compression"],
        "int8_ok": ok,
    }
    if not ok:
        at = "at the per-request default" if t8 is None else "at its own threshold"
        report["int8_refused"] = (
            f"int8 {at} keeps evidence {int8['evidence_preserved']:.3f} / compression "
            f"{int8['compression']:.3f} against fp32's {fp32['evidence_preserved']:.3f} / {fp32['compression']:.3f} "
            f"(allowed: {INT8_MAX_EVIDENCE_LOSS * 100:.1f} / {INT8_MAX_COMPRESSION_LOSS * 100:.0f} points less)"
        )
    return report
