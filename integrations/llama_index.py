"""LlamaIndex: :class:`PrunerPostprocessor`, a ``BaseNodePostprocessor``
(``pip install "pruner-model[llama-index]"``).

>>> from pruner_model.integrations.llama_index import PrunerPostprocessor  # doctest: +SKIP
>>> post = PrunerPostprocessor.from_pretrained("runs/quickstart")  # doctest: +SKIP
>>> nodes = post.postprocess_nodes(retrieved_nodes, query_str="who built the framework?")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from pruner_model.integrations._common import (
    ADAPTER_FIELDS,
    adapter_settings,
    kept,
    load_pruner,
    passage_metadata,
    prune_texts,
    split_options,
)


class PrunerPostprocessor(BaseNodePostprocessor):
    """Keeps the sentences of each node that the query needs: the node's text is replaced
    (``node.set_content``), spans, sentence scores and relevance go into its metadata, and nodes
    pruned to nothing are dropped unless ``drop_empty=False``. A pruned node's ``start_char_idx``
    / ``end_char_idx`` (offsets of the unpruned text in its document) are cleared and kept in
    ``metadata["pruner_original_start_char_idx"]`` / ``["pruner_original_end_char_idx"]``. The node score is kept; with
    ``top_n`` it is a reranker: the ``top_n`` most relevant nodes by the relevance head, best
    first, ``node.score`` their relevance. Loader options (``quantized=True``, ``backend``,
    ``device``, ``dtype``) go with the model; an unknown or misspelt setting is an error."""

    threshold: float | None = Field(default=None)
    token_budget: int | None = Field(default=None)
    neighbors: int = Field(default=0)
    drop_empty: bool = Field(default=True)
    top_n: int | None = Field(default=None, ge=1)
    selection: dict = Field(default_factory=dict)
    model: str | None = Field(default=None, description="the folder or hub id the pruner came from")
    loader: dict = Field(default_factory=dict, description="how it was loaded (quantized, backend, ...)")
    _pruner: Any = PrivateAttr()

    def __init__(self, model, **kwargs):
        saved = kwargs.pop("loader", None) or {}  # from_dict hands the loader options back
        loader, fields = split_options({**saved, **kwargs}, ADAPTER_FIELDS)
        pruner = load_pruner(model, **loader)
        super().__init__(model=getattr(pruner, "source", None), loader=loader, **fields)
        self._pruner = pruner
        adapter_settings(self)  # bad settings fail here, not at the first query

    @classmethod
    def from_pretrained(cls, path, **kwargs) -> PrunerPostprocessor:
        return cls(model=path, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "PrunerPostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("PrunerPostprocessor needs the query (query_bundle or query_str)")
        if not nodes:
            return []
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        ids = [n.node.node_id for n in nodes]
        result = prune_texts(self._pruner, query_bundle.query_str, texts, ids, adapter_settings(self))
        out = []
        for i, p in kept(result, self.drop_empty, self.top_n):
            n = nodes[i]
            node = n.node.model_copy(deep=True)
            node.set_content(p.text)
            meta = passage_metadata(p, result)
            # the node's offsets described the unpruned text in its source document: kept in
            # metadata, cleared on the node (the kept spans are in pruner_spans, relative to it)
            meta["pruner_original_start_char_idx"] = node.start_char_idx
            meta["pruner_original_end_char_idx"] = node.end_char_idx
            if p.text != texts[i]:
                node.start_char_idx = node.end_char_idx = None
            node.metadata.update(meta)
            node.excluded_embed_metadata_keys = [*node.excluded_embed_metadata_keys, *meta]
            node.excluded_llm_metadata_keys = [*node.excluded_llm_metadata_keys, *meta]
            out.append(NodeWithScore(node=node, score=p.relevance if self.top_n is not None else n.score))
        return out
