"""int8 variants of an ONNX export judged on the checkpoint's own calibration data: keep/drop
agreement with fp32 and evidence / compression at the per-request default, per source.

    python experiments/int8_own_data.py build --export runs/multilingual-onnx --model runs/multilingual \\
        --variant ffn --work /tmp/int8-own
    python experiments/int8_own_data.py judge --folder /tmp/int8-own/ffn --model runs/multilingual \\
        [--dev-groups 200] [--source-groups 40] [--scales 1,1.05,1.1]

``build`` writes a copy of the export folder with its ``model.int8.onnx`` quantized one way:

- ``proj``: each feed-forward output projection and both heads in fp32 (the export's first rung);
- ``emb``: ``proj`` and the word embeddings in fp32;
- ``qkv``: ``proj`` and each layer's fused attention (its QKV projection) in fp32;
- ``ffn``: both feed-forward projections and the heads in fp32 (the export's last rung);
- ``smooth-ffn-out`` / ``smooth-all``: SmoothQuant (alpha 0.8, channel maxima from 16 dev groups and
  2 groups of each calibration source after the judged ones) on the feed-forward output
  projections / on every MatMul and attention input, then everything but the heads in int8;
- ``nbits``: onnxruntime's MatMulNBits, 8-bit weights in blocks of 32 with int8 activations per
  block (``accuracy_level`` 4), every MatMul but the heads; the fused attention stays fp32.

``judge`` scores the checkpoint's calibration groups (the first ``--dev-groups`` of its dev file's
seeded permutation and the first ``--source-groups`` of each calibration source: what its
thresholds were fitted on, never a reported split) with the folder's fp32 and int8 graphs, or
with ``--folder torch`` the checkpoint in fp32 and bf16, and prints each source's agreement and
both graphs' evidence / compression at the default; ``--scales`` also multiplies int8's per-request
thresholds by each factor.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

VARIANTS = ("proj", "emb", "qkv", "ffn", "smooth-ffn-out", "smooth-all", "nbits")


def _own_groups(model: str, config, start: int, dev_groups: int, source_groups: int) -> dict:
    """``{slice: groups}``: the checkpoint's dev groups ``start:start+dev_groups`` and each
    calibration source's ``start:start+source_groups``."""
    from pruner_model.evaluation.groups import load_range
    from pruner_model.training.calibration import source_groups as by_source
    from pruner_model.training.config import load_config
    from pruner_model.training.data import read_records

    cfg = load_config(f"{model}/train_config.yaml")
    out = dict(by_source(cfg, start, start + source_groups, config))
    recs, _ = read_records(cfg.data.dev, None, cfg.data.dedup, cfg.data.seed)
    lang, structure = config.segmenter_language, config.segmenter_structure
    out["dev"] = load_range(recs, cfg.data.seed, start, start + dev_groups, lang, structure)
    return out


def _smooth(fp32: Path, int8: Path, pruner, model: str, scope: str) -> None:
    import pruner_model.export.smoothing as sm
    from pruner_model.export.quantize import head_nodes, quantize_int8, smoothing_batches

    def every_input(g):  # every MatMul and fused attention reading an activation, heads apart
        return [n for n in g.node if n.op_type in ("MatMul", "Attention") and "_head/" not in n.name]

    select = every_input if scope == "all" else sm.projections
    groups = [g for gs in _own_groups(model, pruner.config, 200, 16, 2).values() for g in gs if g.passages]
    with tempfile.TemporaryDirectory(dir=int8.parent) as tmp:
        smoothed = Path(tmp) / "smoothed.onnx"
        batches = smoothing_batches(pruner.tokenizer, pruner.config, groups)
        sm.smoothed_graph(fp32, smoothed, batches, select=select)
        quantize_int8(smoothed, int8, keep_sensitive=False, nodes_to_exclude=head_nodes(fp32))


def _nbits(fp32: Path, int8: Path) -> None:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )
    from pruner_model.export.quantize import head_nodes

    algo = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, accuracy_level=4, bits=8)
    q = MatMulNBitsQuantizer(onnx.load(str(fp32)), nodes_to_exclude=head_nodes(fp32), algo_config=algo)
    q.process()
    q.model.save_model_to_file(str(int8), use_external_data_format=False)


def build(export: str, model: str, variant: str, work: str) -> Path:
    import onnx
    from pruner_model.export.quantize import quantize_int8

    from pruner_model import ContextPruner

    dst = Path(work) / variant
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(export, dst, ignore=shutil.ignore_patterns("model.int8.onnx"))
    fp32, int8 = dst / "model.onnx", dst / "model.int8.onnx"
    graph = onnx.load(str(fp32), load_external_data=False).graph
    if variant.startswith("smooth"):
        pruner = ContextPruner.from_pretrained(dst, quantized=False, device="cpu")
        _smooth(fp32, int8, pruner, model, "all" if variant == "smooth-all" else "ffn-out")
    elif variant == "nbits":
        _nbits(fp32, int8)
    else:
        extra = {
            "emb": [n.name for n in graph.node if n.op_type in ("EmbedLayerNormalization", "Gather")],
            "qkv": [n.name for n in graph.node if n.op_type == "Attention"],
        }.get(variant, [])
        quantize_int8(fp32, int8, feed_forward=variant == "ffn", nodes_to_exclude=extra)
    return dst


def judge(folder: str, model: str, dev_groups: int, source_groups: int, scales: list[float]) -> None:
    from pruner_model.evaluation.metrics import metrics_at
    from pruner_model.evaluation.sources import score_at_default
    from pruner_model.evaluation.threshold_fit import RequestDefault

    from pruner_model import ContextPruner

    def load(second: bool):
        if folder == "torch":
            return ContextPruner.from_pretrained(model, dtype="bf16" if second else "fp32", device="cpu")
        return ContextPruner.from_pretrained(folder, quantized=second, device="cpu")

    first = load(False)
    slices = _own_groups(model, first.config, 0, dev_groups, source_groups)
    scored = {}
    for second in (False, True):
        pruner = first if not second else load(True)
        for name, groups in slices.items():
            _, ruled, default = score_at_default(pruner, groups)
            if isinstance(default, float):
                default = RequestDefault(np.full(len(ruled), default), None)
            scored[second, name] = (ruled, default)
    for scale in scales:
        pooled = [[], []]
        for name in slices:
            (r0, d0), (r1, d1) = scored[False, name], scored[True, name]
            m0, m1 = d0.masks(r0), RequestDefault(d1.thresholds * scale, d1.min_relevance).masks(r1)
            a, b = np.concatenate(m0), np.concatenate(m1)
            pooled[0].append(a), pooled[1].append(b)
            e0, e1 = metrics_at(r0, float("nan"), m0), metrics_at(r1, float("nan"), m1)
            print(
                f"x{scale:g} {name:10s} groups {len(r0):4d} sentences {a.size:6d} agreement {np.mean(a == b):.4f}"
                f"  first {e0['evidence_preserved']:.3f} / {e0['compression']:.3f}"
                f"  second {e1['evidence_preserved']:.3f} / {e1['compression']:.3f}"
            )
        agree = np.mean(np.concatenate(pooled[0]) == np.concatenate(pooled[1]))
        print(f"x{scale:g} pooled agreement {agree:.4f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("--export", required=True, help="an ONNX export folder (its model.onnx)")
    b.add_argument("--model", required=True, help="the checkpoint it was exported from")
    b.add_argument("--variant", choices=VARIANTS, required=True)
    b.add_argument("--work", default="/tmp/int8-own")
    j = sub.add_parser("judge")
    j.add_argument("--folder", required=True, help="a folder from build, or 'torch' (fp32 against bf16)")
    j.add_argument("--model", required=True)
    j.add_argument("--dev-groups", type=int, default=200)
    j.add_argument("--source-groups", type=int, default=40)
    j.add_argument("--scales", default="1")
    args = p.parse_args(argv)
    if args.command == "build":
        print(build(args.export, args.model, args.variant, args.work))
    else:
        scales = [float(x) for x in args.scales.split(",")]
        judge(args.folder, args.model, args.dev_groups, args.source_groups, scales)
    return 0


if __name__ == "__main__":
    sys.exit(main())
