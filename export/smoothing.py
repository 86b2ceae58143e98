"""SmoothQuant-style smoothing before int8: each layer's feed-forward output projection reads the
GELU output, whose few outlier channels a per-tensor int8 activation scale cannot hold. Dividing
those channels by s = max|x|^alpha / max|w|^(1 - alpha) (a Mul before the MatMul) and multiplying
the weight rows by s moves the outliers into the weights, which int8 quantizes per channel, so
the whole encoder can run in int8 (docs/experiments/results-log.md: as close to fp32's decisions
as keeping the projections in fp32, and faster).

The channel maxima need text like what the model will read, and a smoothed graph decides a
little differently from fp32: so the export smooths with labeled records (``--calibration-data``),
on which the int8 graph is then judged by evidence and compression against fp32, and falls back to
fp32 projections when it fails. Such an export also writes the maxima it used,
``int8_smoothing.safetensors`` (one vector a layer, keyed ``layer.N``), and a checkpoint folder
that carries that file (the shipped default model does: measured on every held-back split,
docs/serving.md) is smoothed with it when exported without labels, judged by the keep/drop
agreement on the validation sentences. Without labels or the file the projections stay fp32.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from pruner_model.core.records import current_umask

ALPHA = 0.8  # the migration strength: chosen on the validation sentences (0.7-0.9 tie there)
GROUPS = 16  # groups whose windows give the channel maxima
MAXIMA_FILE = "int8_smoothing.safetensors"  # the channel maxima an export smoothed with, by layer


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


def _layer(name: str) -> str | None:
    """``layer.N`` of a BERT-like node name (``/model/encoder/encoder/layer.3/output/dense/MatMul``)."""
    import re

    m = re.search(r"layer\.(\d+)/", name)
    return f"layer.{m.group(1)}" if m else None


def save_maxima(amax: dict[str, np.ndarray], fp32_path: Path, path: Path, source: str) -> None:
    """The channel maxima of the feed-forward output projections of the graph at ``fp32_path``
    (keyed by their input's name, as :func:`channel_maxima` gives them), by layer, as safetensors
    at ``path``, with ``source`` (the text they were measured on) in its metadata."""
    import onnx
    from safetensors.numpy import save_file

    targets = projections(onnx.load(str(fp32_path), load_external_data=False).graph)
    tensors = {_layer(n.name): amax[n.input[0]].astype(np.float32) for n in targets if _layer(n.name)}
    save_file(tensors, str(path), metadata={"source": source, "alpha": str(ALPHA)})
    os.chmod(path, 0o666 & ~current_umask())  # as the export's other files


def stored_maxima(model_dir: Path, fp32_path: Path) -> tuple[dict[str, np.ndarray], str] | None:
    """``(maxima keyed by input name, what they were measured on)`` from ``model_dir``'s
    :data:`MAXIMA_FILE`, for the feed-forward output projections of the graph at ``fp32_path``;
    None when the folder has no such file or it does not fit this graph (another layer count or
    width)."""
    import onnx
    from safetensors import safe_open

    path = Path(model_dir) / MAXIMA_FILE
    if not path.is_file():
        return None
    graph = onnx.load(str(fp32_path), load_external_data=False).graph
    widths = {i.name: i.dims[0] for i in graph.initializer if len(i.dims) == 2}
    targets = projections(graph)
    with safe_open(str(path), framework="numpy") as f:
        keys, source = set(f.keys()), (f.metadata() or {}).get("source", MAXIMA_FILE)
        if not targets or keys != {_layer(n.name) for n in targets}:
            return None
        amax = {n.input[0]: f.get_tensor(_layer(n.name)) for n in targets}
    if any(amax[n.input[0]].shape != (widths.get(n.input[1]),) for n in targets):
        return None
    return amax, source


def smoothed_graph(
    fp32_path: Path,
    out_path: Path,
    batches: list[dict] | None,
    alpha: float = ALPHA,
    select=projections,
    amax: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Write ``fp32_path`` with the nodes ``select(graph)`` picks (its feed-forward output
    projections unless told otherwise; each reads its activation as input 0 and its weight rows as
    input 1) smoothed to ``out_path``, with the channel maxima ``amax`` or those measured over
    ``batches``; returns the maxima used."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(fp32_path))
    g = model.graph
    targets = select(g)
    if amax is None:
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
    return amax
