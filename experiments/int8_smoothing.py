"""SmoothQuant-style smoothing of each layer's feed-forward output projection, then dynamic int8.

    python experiments/int8_smoothing.py --export DIR [--alpha 0.8] [--valonly]
        [--data data/qa/dev.jsonl] [--work /tmp/int8-smoothing]

The input of each ``layer.N/output/dense`` MatMul of the export's fp32 graph (the GELU output,
whose outlier channels a per-tensor activation scale loses) is divided per channel by
s = max|X|^alpha / max|W|^(1-alpha) (a Mul inserted before the MatMul) and the weight rows are
multiplied by s; channel maxima come from the validation pairs and 16 dev groups outside the
compared ones (``--valonly``: the validation pairs alone); the export's own functions
(``export/smoothing.py``, ``export/quantize.py``). Then dynamic per-channel int8 with both heads in
fp32. Prints keep/drop agreement with fp32 on the validation sentences and on every
sentence of the first 100 dev groups of the seeded permutation, and the int8 speed of one
16-window batch against fp32 (median of 10, measured in this run).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np


def median_seconds(backend, batch, runs: int = 10) -> float:
    backend(batch)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        backend(batch)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", required=True, help="export folder holding model.onnx")
    ap.add_argument("--alpha", type=float, default=0.8)
    ap.add_argument("--valonly", action="store_true", help="channel maxima from the validation pairs alone")
    ap.add_argument("--data", default="data/qa/dev.jsonl")
    ap.add_argument("--work", default="/tmp/int8-smoothing")
    args = ap.parse_args()
    src = Path(args.export)
    if not (src / "model.onnx").is_file():
        ap.error(f"no model.onnx in {src} (run 'pruner export' first)")

    from pruner_model.core.configuration import PrunerConfig
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.groups import load_range
    from pruner_model.export.quantize import head_nodes, quantize_int8, smoothing_batches
    from pruner_model.export.smoothing import smoothed_graph
    from pruner_model.export.validate import int8_agreement, keep_decisions, sample_inputs
    from pruner_model.inference.onnx_backend import OnnxBackend
    from pruner_model.inference.pruner import ContextPruner
    from transformers import AutoTokenizer

    tok, cfg = AutoTokenizer.from_pretrained(str(src)), PrunerConfig.from_pretrained(str(src))
    records = read_jsonl(args.data)
    extra = [] if args.valonly else [g for g in load_range(records, 0, 100, 116) if g.passages]
    d = Path(args.work) / f"alpha{args.alpha}"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    smoothed_graph(
        src / "model.onnx", d / "model.smoothed.onnx", smoothing_batches(tok, cfg, extra), args.alpha
    )
    quantize_int8(
        d / "model.smoothed.onnx",
        d / "model.int8.onnx",
        keep_sensitive=False,
        nodes_to_exclude=head_nodes(src / "model.onnx"),
    )
    items = [(g.query, [p["text"] for p in g.passages]) for g in load_range(records, 0, 0, 100)]
    ref = keep_decisions(ContextPruner(OnnxBackend.from_pretrained(src, device="cpu"), tok, cfg), items)
    int8 = OnnxBackend.from_pretrained(d, device="cpu", quantized=True)
    batch = sample_inputs(tok, cfg, queries=[items[0][0]] * 16, passages=[items[0][1][0]] * 16)
    fp32_s = median_seconds(OnnxBackend.from_pretrained(src, device="cpu"), batch)
    row = {
        "alpha": args.alpha,
        "calibrated_on": "validation pairs" if args.valonly else "validation pairs + 16 dev groups",
        "agreement_validation_sentences": round(int8_agreement(d, tok, cfg)["int8_agreement"], 4),
        "agreement_dev_sentences": round(
            float(np.mean(keep_decisions(ContextPruner(int8, tok, cfg), items) == ref)), 4
        ),
        "int8_speed_vs_fp32": round(fp32_s / median_seconds(int8, batch), 2),
    }
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
