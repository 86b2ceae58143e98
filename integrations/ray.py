"""Ray Data: :class:`PrunerPredictor`, a callable class for ``Dataset.map_batches`` — the model
loads once per worker (nothing heavy is pickled), each batch of ``query``/``passages`` rows gains
the pruned text, the result and its stats (``pip install "pruner-model[ray]"``).

>>> ds = ray.data.read_json("groups.jsonl")  # doctest: +SKIP
>>> out = ds.map_batches(PrunerPredictor, fn_constructor_kwargs={"model": "runs/quickstart-onnx"},
...                      concurrency=4, batch_size=32)  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
from pruner_model.integrations._common import LOADER_OPTIONS, load_pruner


def _plain(value):
    """Ray hands nested columns over as numpy arrays; the pruner takes lists, dicts and strings."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


class PrunerPredictor:
    """Prunes the ``passages`` of each row for its ``query``.

    Args:
        model: checkpoint or ONNX folder (or hub id), loaded once in each worker.
        backend, device: as for :meth:`ContextPruner.from_pretrained` (``device="cuda"`` with
            ``num_gpus=1`` in ``map_batches`` on GPU workers); ``quantized=True`` (an ONNX
            folder's int8 graph), ``dtype`` and ``batch_size`` load the same way.
        **selection: any :class:`SelectionParams` field, e.g. ``token_budget=300``.

    Adds the columns ``pruned_text`` (str), ``compression`` (float), ``tokens_in``/``tokens_out``
    (int) and ``prune_result`` (``PruneResult.to_dict()`` as JSON).
    """

    def __init__(self, model, backend: str = "auto", device: str | None = None, **settings):
        loader = {k: settings.pop(k) for k in list(settings) if k in LOADER_OPTIONS}
        self.pruner = load_pruner(model, backend=backend, device=device, **loader)
        self.params = self.pruner.selection_params(**settings)

    def __call__(self, batch: dict) -> dict:
        queries = [str(q) for q in batch["query"]]
        passages = [_plain(p) for p in batch["passages"]]
        results = self.pruner.prune_batch(list(zip(queries, passages)), self.params)
        out = dict(batch)
        out["pruned_text"] = np.array([r.text for r in results], dtype=object)
        out["compression"] = np.array([r.stats.compression for r in results], dtype=np.float64)
        out["tokens_in"] = np.array([r.stats.tokens_in for r in results], dtype=np.int64)
        out["tokens_out"] = np.array([r.stats.tokens_out for r in results], dtype=np.int64)
        out["prune_result"] = np.array(
            [json.dumps(r.to_dict(), ensure_ascii=False) for r in results], dtype=object
        )
        return out
