"""LangChain: :class:`PrunerCompressor`, a ``BaseDocumentCompressor`` for
``ContextualCompressionRetriever`` (``pip install "pruner-model[langchain]"``).

>>> from pruner_model.integrations.langchain import PrunerCompressor  # doctest: +SKIP
>>> compressor = PrunerCompressor.from_pretrained("runs/quickstart", token_budget=400)  # doctest: +SKIP
>>> docs = compressor.compress_documents(retrieved_docs, "who built the framework?")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pruner_model.integrations._common import (
    ADAPTER_FIELDS,
    adapter_settings,
    kept,
    load_pruner,
    passage_metadata,
    prune_texts,
    split_options,
)
from pydantic import ConfigDict, Field, field_serializer


class PrunerCompressor(BaseDocumentCompressor):
    """Keeps the sentences of each document that the query needs; with ``top_n``, also a
    reranker: the ``top_n`` documents the relevance head ranks highest, best first.

    The kept text replaces ``page_content``; the original metadata stays, and
    ``relevance_score`` (where CohereRerank and FlashrankRerank put theirs), ``pruner_spans``,
    ``pruner_sentence_scores``, ``pruner_relevance`` are added. Documents pruned to nothing are
    dropped unless ``drop_empty=False``. All documents of one call are judged together (one
    ``prune()`` call), as the relative threshold expects. Loader options (``quantized=True`` for
    an ONNX folder's int8 graph, ``backend``, ``device``, ``dtype``) go with ``from_pretrained``;
    an unknown or misspelt setting is an error.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: Any  # a ContextPruner, or a folder / hub id (loaded at construction)
    threshold: float | None = None
    token_budget: int | None = None
    neighbors: int = 0
    drop_empty: bool = True
    top_n: int | None = Field(default=None, ge=1)  # rerank: keep the top_n most relevant, best first
    selection: dict = Field(default_factory=dict)  # any other SelectionParams field

    def __init__(self, model, **kwargs):
        loader, fields = split_options(dict(kwargs), ADAPTER_FIELDS)
        super().__init__(model=load_pruner(model, **loader), **fields)
        adapter_settings(self)  # bad settings fail here, not at the first query

    @field_serializer("model")
    def _model_source(self, model) -> str:
        """``model_dump``/``model_dump_json`` write where the pruner came from, not the object."""
        return getattr(model, "source", None) or type(model).__name__

    @classmethod
    def from_pretrained(cls, path, **kwargs) -> PrunerCompressor:
        """Load the pruner from a folder or hub id; ``kwargs`` are loader options and the
        compressor's fields."""
        return cls(model=path, **kwargs)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        if not documents:
            return []
        ids = [d.id or str(i) for i, d in enumerate(documents)]
        result = prune_texts(
            self.model, query, [d.page_content for d in documents], ids, adapter_settings(self)
        )
        out = []
        for i, p in kept(result, self.drop_empty, self.top_n):
            doc = documents[i]
            meta = {**doc.metadata, **passage_metadata(p, result)}
            out.append(Document(page_content=p.text, metadata=meta, id=doc.id))
        return out
