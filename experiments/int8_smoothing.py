"""SmoothQuant-style smoothing of each layer's feed-forward output projection, then dynamic int8.

    python experiments/int8_smoothing.py --export DIR [--alpha 0.8] [--valonly]
        [--data data/mix/dev.jsonl] [--work /tmp/int8-smoothing]

The input of each ``layer.N/output/dense`` MatMul of the export's fp32 graph (the GELU output,
whose outlier channels a per-tensor activation scale loses) is divided per channel by
s = max|X|^alpha / max|W|^(1-alpha) (a Mul inserted before the MatMul) and the weight rows are
multiplied by s; channel maxima come from the validation pairs and 16 dev groups outside the
compared ones (``--valonly``: the validation pairs alone). Then dynamic per-channel int8 with both
heads in fp32. Prints keep/drop agreement with fp32 on the validation sentences and on every
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


def channel_maxima(model_path: Path, targets, batches: list[dict]) -> dict[str, np.ndarray]:
    """max |x| per input channel of each target MatMul over ``batches``."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    probe = onnx.load(str(model_path))
    for n in targets:
        probe.graph.output.append(helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    amax: dict[str, np.ndarray] = {}
    for b in batches:
        outs = sess.run([n.input[0] for n in targets], {k: b[k].astype(np.int64) for k in names})
        for n, o in zip(targets, outs):
            m = np.abs(o.reshape(-1, o.shape[-1])).max(0)
            amax[n.input[0]] = np.maximum(amax[n.input[0]], m) if n.input[0] in amax else m
    return amax


def smooth(model, targets, amax: dict, alpha: float) -> None:
    """Move each target's activation outliers into its weights (in place)."""
    import onnx
    from onnx import helper, numpy_helper

    g = model.graph
    inits = {i.name: i for i in g.initializer}
    for n in targets:
        w = numpy_helper.to_array(inits[n.input[1]])  # [in, out]
        a = np.maximum(amax[n.input[0]], 1e-5)
        s = np.clip(a**alpha / np.maximum(np.abs(w).max(1), 1e-5) ** (1 - alpha), 1e-2, 1e3).astype(
            np.float32
        )
        inits[n.input[1]].CopyFrom(numpy_helper.from_array((w * s[:, None]).astype(np.float32), n.input[1]))
        inv = helper.make_tensor(n.name + "_smooth_inv", onnx.TensorProto.FLOAT, [len(s)], (1.0 / s).tolist())
        g.initializer.append(inv)
        out = n.input[0] + "_smoothed"
        g.node.insert(
            list(g.node).index(n),
            helper.make_node("Mul", [n.input[0], inv.name], [out], name=n.name + "_smooth"),
        )
        n.input[0] = out


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
    ap.add_argument("--data", default="data/mix/dev.jsonl")
    ap.add_argument("--work", default="/tmp/int8-smoothing")
    args = ap.parse_args()
    src = Path(args.export)
    if not (src / "model.onnx").is_file():
        ap.error(f"no model.onnx in {src} (run 'pruner export' first)")

    import onnx
    from pruner_model.core.configuration import PrunerConfig
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.groups import load_range
    from pruner_model.export.quantize import quantize_int8
    from pruner_model.export.validate import int8_agreement, keep_decisions, sample_inputs
    from pruner_model.inference.onnx_backend import OnnxBackend
    from pruner_model.inference.pruner import ContextPruner
    from transformers import AutoTokenizer

    tok, cfg = AutoTokenizer.from_pretrained(str(src)), PrunerConfig.from_pretrained(str(src))
    model = onnx.load(str(src / "model.onnx"))
    targets = [
        n
        for n in model.graph.node
        if n.op_type == "MatMul" and "/output/dense/" in n.name and "/attention/" not in n.name
    ]
    records = read_jsonl(args.data)
    batches = [sample_inputs(tok, cfg)]
    if not args.valonly:
        batches += [
            sample_inputs(
                tok, cfg, queries=[g.query] * len(g.passages), passages=[p["text"] for p in g.passages]
            )
            for g in load_range(records, 0, 100, 116)
            if g.passages
        ]
    smooth(model, targets, channel_maxima(src / "model.onnx", targets, batches), args.alpha)
    d = Path(args.work) / f"alpha{args.alpha}"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    onnx.save(model, str(d / "model.smoothed.onnx"))
    heads = [x for n in model.graph.node if "_head/" in n.name for x in (n.name, n.name + "_MatMul")]
    quantize_int8(
        d / "model.smoothed.onnx", d / "model.int8.onnx", keep_sensitive=False, nodes_to_exclude=heads
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
