"""Haystack: :class:`PrunerComponent`, a ``@component`` for pipelines
(``pip install "pruner-model[haystack]"``).

>>> from haystack import Pipeline  # doctest: +SKIP
>>> pipe = Pipeline(); pipe.add_component("pruner", PrunerComponent(model="runs/quickstart"))  # doctest: +SKIP
>>> pipe.run({"pruner": {"query": "who built it?", "documents": docs}})["pruner"]["documents"]  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from pruner_model.integrations._common import (
    adapter_settings,
    kept,
    load_pruner,
    passage_metadata,
    prune_texts,
)


@component
class PrunerComponent:
    """Keeps the sentences of each document that the query needs: ``content`` becomes the kept
    text, spans, sentence scores and relevance go into ``meta``; documents pruned to nothing are
    dropped unless ``drop_empty=False``. With ``top_n`` it is a ranker: the ``top_n`` most
    relevant documents by the relevance head, best first, ``Document.score`` their relevance.
    ``quantized``, ``backend``, ``device`` and ``dtype`` choose how the model loads (an ONNX
    folder: ``True`` its int8 graph, ``False`` its fp32 one, None the int8 graph on a CPU when the
    export validated it). Serializable (``to_dict``/``from_dict``) when ``model``
    is a folder or hub id."""

    def __init__(
        self,
        model: str,
        threshold: float | None = None,
        token_budget: int | None = None,
        neighbors: int = 0,
        drop_empty: bool = True,
        selection: dict[str, Any] | None = None,
        top_n: int | None = None,
        quantized: bool | None = None,
        backend: str = "auto",
        device: str | None = None,
        dtype: str | None = None,
    ):
        self.model = model
        self.threshold, self.token_budget, self.neighbors = threshold, token_budget, neighbors
        self.drop_empty, self.top_n = drop_empty, top_n
        self.selection = dict(selection or {})
        self.quantized, self.backend, self.device, self.dtype = quantized, backend, device, dtype
        adapter_settings(self)  # bad settings fail here, not at the first run
        if top_n is not None and top_n < 1:
            raise ValueError(f"top_n must be >= 1, got {top_n}")
        self._pruner = None

    def warm_up(self) -> None:
        """Load the pruner (Haystack calls this before the first run); components built from the
        same folder and options share one instance, loaded once even when threads race."""
        if self._pruner is None:
            loader = {"quantized": self.quantized, "backend": self.backend, "device": self.device}
            self._pruner = load_pruner(self.model, dtype=self.dtype, **loader)

    @component.output_types(documents=list[Document])
    def run(self, query: str, documents: list[Document]) -> dict[str, list[Document]]:
        self.warm_up()
        texted = [d for d in documents if d.content is not None]  # a table, an image: passed on as is
        if not texted:
            return {"documents": list(documents)}
        result = prune_texts(
            self._pruner, query, [d.content for d in texted], [d.id for d in texted], adapter_settings(self)
        )
        out = [d for d in documents if d.content is None]
        for i, p in kept(result, self.drop_empty, self.top_n):
            d = texted[i]
            score = p.relevance if self.top_n is not None else d.score
            meta = {**d.meta, **passage_metadata(p, result)}
            out.append(dataclasses.replace(d, content=p.text, meta=meta, score=score))
        return {"documents": out}

    def to_dict(self) -> dict[str, Any]:
        if not isinstance(self.model, str):
            raise TypeError("only a PrunerComponent built from a model folder or hub id serializes")
        return default_to_dict(
            self,
            model=self.model,
            threshold=self.threshold,
            token_budget=self.token_budget,
            neighbors=self.neighbors,
            drop_empty=self.drop_empty,
            selection=self.selection,
            top_n=self.top_n,
            quantized=self.quantized,
            backend=self.backend,
            device=self.device,
            dtype=self.dtype,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrunerComponent:
        return default_from_dict(cls, data)
