"""SmoothQuant-style smoothing before int8: each layer's feed-forward output projection reads the
GELU output, whose few outlier channels a per-tensor int8 activation scale cannot hold. Dividing
those channels by s = max|x|^alpha / max|w|^(1 - alpha) (a Mul before the MatMul) and multiplying
the weight rows by s moves the outliers into the weights, which int8 quantizes per channel, so
the whole encoder can run in int8 (docs/experiments/results-log.md: as close to fp32's decisions
as keeping the projections in fp32, and faster).

The channel maxima need text like what the model will read, and a smoothed graph decides a
little differently from fp32 (on the quickstart it kept as many answers but compressed up to 1.4
points less on nyt): so the export smooths only with labeled records (``--calibration-data``), on
which the int8 graph is then judged by evidence and compression against fp32, and falls back to
fp32 projections when it fails. Without labels the projections stay fp32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ALPHA = 0.8  # the migration strength: chosen on the validation sentences (0.7-0.9 tie there)
GROUPS = 16  # groups whose windows give the channel maxima


def smoothing_text(records: list[dict] | None, config, judged: int = 0) -> tuple[list, str] | None:
    """``(groups, where they came from)``: ``GROUPS`` groups of the seeded permutation of the
    labeled ``records`` given to the export, taken after the first ``judged`` (those the int8
    graph is judged on), or the first ones when the records hold no more; None without records."""
    from pruner_model.evaluation.groups import load_range

    if not records:
        return None
    lang, structure = config.segmenter_language, config.segmenter_structure
    groups = [g for g in load_range(records, 0, judged, judged + GROUPS, lang, structure) if g.passages]
    where = f"the calibration data (groups {judged}-{judged + GROUPS - 1}, apart from those judged on)"
    if not groups:  # a small file: the groups it is judged on are all there is
        groups = [g for g in load_range(records, 0, 0, GROUPS, lang, structure) if g.passages]
        where = "the calibration data (its first groups, also judged on: the file holds no others)"
    return (groups, where) if groups else None


def is_projection(name: str) -> bool:
    """A feed-forward output projection's node, by its name (BERT-like: ``layer.N/output/dense``,
    not the attention's ``attention/output/dense``)."""
    return "/output/dense/" in name and "/attention/" not in name


def projections(graph) -> list:
    """The feed-forward output projections' MatMuls."""
    return [n for n in graph.node if n.op_type == "MatMul" and is_projection(n.name)]


def channel_maxima(fp32_path: Path, targets, batches: list[dict]) -> dict[str, np.ndarray]:
    """max |x| per input channel of each target MatMul over ``batches`` (onnxruntime, CPU)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    probe = onnx.load(str(fp32_path))
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


def smoothed_graph(
    fp32_path: Path, out_path: Path, batches: list[dict], alpha: float = ALPHA, select=projections
) -> int:
    """Write ``fp32_path`` with the nodes ``select(graph)`` picks (its feed-forward output
    projections unless told otherwise; each reads its activation as input 0 and its weight rows as
    input 1) smoothed to ``out_path``; returns how many."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(fp32_path))
    g = model.graph
    targets = select(g)
    amax = channel_maxima(fp32_path, targets, batches)
    inits = {i.name: i for i in g.initializer}
    for n in targets:
        w = numpy_helper.to_array(inits[n.input[1]])  # [in, out]
        a = np.maximum(amax[n.input[0]], 1e-5)
        s = np.clip(a**alpha / np.maximum(np.abs(w).max(1), 1e-5) ** (1 - alpha), 1e-2, 1e3).astype(
            np.float32
        )
        inits[n.input[1]].CopyFrom(numpy_helper.from_array((w * s[:, None]).astype(np.float32), n.input[1]))
        inv = numpy_helper.from_array((1.0 / s).astype(np.float32), n.name + "_smooth_inv")
        g.initializer.append(inv)
        out = n.input[0] + "_smoothed"
        g.node.insert(
            list(g.node).index(n),
            helper.make_node("Mul", [n.input[0], inv.name], [out], name=n.name + "_smooth"),
        )
        n.input[0] = out
    onnx.save(model, str(out_path))
    return len(targets)
