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
from pruner_model.integrations._common import load_pruner, passage_metadata, prune_texts


@component
class PrunerComponent:
    """Keeps the sentences of each document that the query needs: ``content`` becomes the kept
    text, spans, sentence scores and relevance go into ``meta``; documents pruned to nothing are
    dropped unless ``drop_empty=False``. Serializable (``to_dict``/``from_dict``) when ``model``
    is a folder or hub id."""

    def __init__(
        self,
        model: str,
        threshold: float | None = None,
        token_budget: int | None = None,
        neighbors: int = 0,
        drop_empty: bool = True,
        selection: dict[str, Any] | None = None,
    ):
        self.model = model
        self.threshold, self.token_budget, self.neighbors = threshold, token_budget, neighbors
        self.drop_empty = drop_empty
        self.selection = dict(selection or {})
        self._pruner = None

    def warm_up(self) -> None:
        """Load the pruner (Haystack calls this before the first run)."""
        if self._pruner is None:
            self._pruner = load_pruner(self.model)

    @component.output_types(documents=list[Document])
    def run(self, query: str, documents: list[Document]) -> dict[str, list[Document]]:
        self.warm_up()
        if not documents:
            return {"documents": []}
        settings = {
            "threshold": self.threshold,
            "token_budget": self.token_budget,
            "neighbors": self.neighbors,
        }
        texts = [d.content or "" for d in documents]
        result = prune_texts(
            self._pruner, query, texts, [d.id for d in documents], {**settings, **self.selection}
        )
        out = []
        for d, p in zip(documents, result.passages):
            if not p.text and self.drop_empty:
                continue
            out.append(dataclasses.replace(d, content=p.text, meta={**d.meta, **passage_metadata(p, result)}))
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
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrunerComponent:
        return default_from_dict(cls, data)
