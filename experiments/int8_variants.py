"""Which int8 quantization keeps an export's keep/drop decisions: a side-by-side check.

    python experiments/int8_variants.py --export runs/reference-onnx [--data data/qa/dev.jsonl]
        [--groups 100] [--work /tmp/int8-variants]

Quantizes the fp32 ``model.onnx`` of an export folder (``pruner export`` without ``--quantize``)
several ways with ``export.quantize.quantize_int8``: one scale per tensor (``plain``), per
output channel (what ``pruner export`` uses), ``reduce_range``, per channel with the two heads left
in fp32, per tensor with the last encoder layer and heads left in fp32, and static QDQ (activation
ranges calibrated on 16 dev groups outside the compared ones, per-channel weights). For each it prints the keep/drop agreement with fp32 on the export's
128 validation sentences and on every sentence of the first ``--groups`` dev groups of the seeded
permutation (the in-training evaluation slice), and the int8 time of one 16-window batch relative
to ``plain`` (median of 8, measured in this run; absolute times are not printed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path


def quantize_static_qdq(fp32_path: Path, int8_path: Path, batches: list[dict]) -> None:
    """Static int8 (QDQ format, per-channel weights, activation ranges from ``batches``) of the
    MatMuls of an exported graph."""
    from onnx import TensorProto
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    quantize_static(
        str(fp32_path),
        str(int8_path),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"],
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--export", required=True, help="export folder holding model.onnx")
    ap.add_argument("--data", default="data/qa/dev.jsonl")
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="the training config's data.seed")
    ap.add_argument("--work", default="/tmp/int8-variants", help="scratch folder for the variants")
    args = ap.parse_args()
    src = Path(args.export)
    if not (src / "model.onnx").is_file():
        ap.error(f"no model.onnx in {src} (run 'pruner export' first)")
    if not Path(args.data).is_file():
        ap.error(f"no dev records at {args.data} (build them with 'pruner data squad')")

    import numpy as np
    import onnx
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.groups import load_range
    from pruner_model.export.quantize import quantize_int8
    from pruner_model.export.validate import int8_agreement, keep_decisions, sample_inputs
    from pruner_model.inference.onnx_backend import OnnxBackend
    from pruner_model.inference.pruner import ContextPruner
    from transformers import AutoTokenizer

    from pruner_model import PrunerConfig

    tok = AutoTokenizer.from_pretrained(str(src))
    cfg = PrunerConfig.from_pretrained(str(src))
    groups = load_range(read_jsonl(args.data), args.seed, 0, args.groups)
    items = [(g.query, [p["text"] for p in g.passages]) for g in groups]

    ref = keep_decisions(ContextPruner(OnnxBackend.from_pretrained(src, device="cpu"), tok, cfg), items)
    nodes = [n.name for n in onnx.load(str(src / "model.onnx"), load_external_data=False).graph.node]
    heads = [n for n in nodes if "_head/" in n]
    k = getattr(cfg.encoder_config, "num_hidden_layers", 1) - 1  # the last encoder layer's nodes
    last = [n for n in nodes if f"layer.{k}/" in n or n == f"Attention_{k}"]
    first = [n for n in nodes if "layer.0/" in n or n == "Attention_0"]
    attention = [n for n in nodes if n.startswith("Attention_") or "/attention/" in n]
    ffn_out = [
        n for n in nodes if "/output/dense/" in n and "attention" not in n
    ]  # each layer's FFN down-projection
    variants = {  # name (also the scratch folder's) -> quantize_int8 arguments
        "plain": {"per_channel": False},
        "per_channel": {},
        "reduce_range": {"per_channel": False, "reduce_range": True},
        "per_channel_heads_fp32": {"nodes_to_exclude": heads},
        "last_layer_heads_fp32": {"per_channel": False, "nodes_to_exclude": last + heads},
        "per_channel_last_layer_heads_fp32": {"nodes_to_exclude": last + heads},
        "per_channel_first_last_heads_fp32": {"nodes_to_exclude": first + last + heads},
        "per_channel_ffn_out_heads_fp32": {"nodes_to_exclude": ffn_out + heads},
        "per_channel_attention_heads_fp32": {"nodes_to_exclude": attention + heads},
        # static: activation ranges calibrated on dev windows, QDQ nodes around the MatMuls
        "static_qdq_per_channel": {"static": True},
    }
    extra = load_range(read_jsonl(args.data), args.seed, args.groups, args.groups + 16)
    calibration_batches = [
        sample_inputs(tok, cfg, queries=[g.query] * len(g.passages), passages=[p["text"] for p in g.passages])
        for g in extra
        if g.passages
    ]
    work = Path(args.work)
    batch = sample_inputs(tok, cfg, queries=[items[0][0]] * 16, passages=[items[0][1][0]] * 16)
    print(f"{len(ref)} sentences in {len(items)} dev groups; fp32 keeps {ref.mean():.3f} of them")
    times = {}
    for name, kw in variants.items():
        d = work / name
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        try:
            if kw.get("static"):
                quantize_static_qdq(d / "model.onnx", d / "model.int8.onnx", calibration_batches)
            else:
                quantize_int8(d / "model.onnx", d / "model.int8.onnx", **{"keep_sensitive": False, **kw})
        except Exception as exc:  # a variant onnxruntime cannot build is reported, not fatal
            print(
                json.dumps({"variant": name, "failed": f"{type(exc).__name__}: {str(exc)[:200]}"}), flush=True
            )
            continue
        synthetic = int8_agreement(d, tok, cfg)["int8_agreement"]
        backend = OnnxBackend.from_pretrained(d, device="cpu", quantized=True)
        real = float(np.mean(keep_decisions(ContextPruner(backend, tok, cfg), items) == ref))
        backend(batch)
        runs = []
        for _ in range(8):
            t0 = time.perf_counter()
            backend(batch)
            runs.append(time.perf_counter() - t0)
        times[name] = float(np.median(runs))
        print(
            json.dumps(
                {
                    "variant": name,
                    "agreement_validation_sentences": round(synthetic, 4),
                    "agreement_dev_sentences": round(real, 4),
                    "time_vs_plain": round(times[name] / times["plain"], 3),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
