"""Validation of an ONNX export against its checkpoint: token probabilities and passage relevance
of the exported graph must match torch within ``FP32_TOLERANCE`` on fixed (query, passage)
pairs; an int8 graph (without labeled data) must make the same keep/drop decision as fp32 on at
least ``INT8_MIN_AGREEMENT`` of their sentences."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pruner_model.core.scoring import pad_rows, pad_value
from pruner_model.inference.agreement import (
    MIN_AGREEMENT,
    VALIDATION_PASSAGES,
    VALIDATION_QUERIES,
    keep_decisions,
    validation_items,
)

__all__ = ["VALIDATION_PASSAGES", "VALIDATION_QUERIES", "keep_decisions", "sample_inputs", "validate_export"]

FP32_TOLERANCE = 1e-4  # max |p_onnx - p_torch| over token probabilities
INT8_MIN_AGREEMENT = MIN_AGREEMENT  # share of sentences with the same keep/drop decision as fp32


def sample_inputs(tokenizer, config, queries=None, passages=None) -> dict[str, np.ndarray]:
    """A padded batch of windows from fixed (query, passage) pairs of varied length."""
    from pruner_model.core.alignment import encode_pairs

    queries = queries or VALIDATION_QUERIES
    passages = passages or VALIDATION_PASSAGES
    w = encode_pairs(tokenizer, queries, passages, config.max_length, config.stride, config.max_query_length)
    pad = tokenizer.pad_token_id or 0
    return {name: pad_rows(rows, pad_value(name, pad)) for name, rows in w.features.items()}


def validate_export(model, tokenizer, output_dir: Path) -> dict:
    """Score the validation pairs through the one scoring path with torch and with the exported
    graph; token probabilities and passage relevance must agree within ``FP32_TOLERANCE``."""
    from pruner_model.core.alignment import unit_bounds
    from pruner_model.core.scoring import score_pairs
    from pruner_model.core.segmentation import segment
    from pruner_model.inference.onnx_backend import OnnxBackend

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
    return {"fp32_max_abs_diff": diff, "fp32_tolerance": FP32_TOLERANCE, "fp32_ok": diff <= FP32_TOLERANCE}


def int8_agreement(output_dir: Path, tokenizer, config, items=None) -> dict:
    """Share of sentences whose keep/drop decision under int8 equals fp32's, on sample items."""
    from pruner_model.inference.onnx_backend import OnnxBackend
    from pruner_model.inference.pruner import ContextPruner

    if items is None:
        items = validation_items()
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
