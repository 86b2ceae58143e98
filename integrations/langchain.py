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
from pruner_model.integrations._common import load_pruner, passage_metadata, prune_texts
from pydantic import ConfigDict, Field


class PrunerCompressor(BaseDocumentCompressor):
    """Keeps the sentences of each document that the query needs.

    The kept text replaces ``page_content``; the original metadata stays, and ``pruner_spans``,
    ``pruner_sentence_scores``, ``pruner_relevance`` are added. Documents pruned to nothing are
    dropped unless ``drop_empty=False``. All documents of one call are judged together (one
    ``prune()`` call), as the relative threshold expects.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: Any  # a ContextPruner, or a folder / hub id (loaded at construction)
    threshold: float | None = None
    token_budget: int | None = None
    neighbors: int = 0
    drop_empty: bool = True
    selection: dict = Field(default_factory=dict)  # any other SelectionParams field

    def __init__(self, model, **kwargs):
        super().__init__(model=load_pruner(model), **kwargs)

    @classmethod
    def from_pretrained(cls, path, **kwargs) -> PrunerCompressor:
        """Load the pruner from a folder or hub id; ``kwargs`` are the compressor's fields."""
        return cls(model=path, **kwargs)

    def _settings(self) -> dict:
        return {
            "threshold": self.threshold,
            "token_budget": self.token_budget,
            "neighbors": self.neighbors,
            **self.selection,
        }

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        if not documents:
            return []
        ids = [d.id or str(i) for i, d in enumerate(documents)]
        result = prune_texts(self.model, query, [d.page_content for d in documents], ids, self._settings())
        out = []
        for doc, p in zip(documents, result.passages):
            if not p.text and self.drop_empty:
                continue
            meta = {**doc.metadata, **passage_metadata(p, result)}
            out.append(Document(page_content=p.text, metadata=meta, id=doc.id))
        return out
