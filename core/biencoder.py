"""The bundled sentence encoder (all-MiniLM-L6-v2) as a bi-encoder: the cosine between a query and
each sentence of a passage, mean-pooled embeddings as the model was trained with.

It is the ``biencoder`` baseline of ``pruner evaluate`` and the passage-relevance teacher of
training (``model.relevance_distill_weight``): a passage scores its best sentence's cosine, a
similarity learned from a billion sentence pairs of many domains that needs no training here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pruner_model.core.alignment import tokenizer_lock


class BiEncoder:
    """Unit-length embeddings of texts from a sentence-transformers encoder folder (default: the
    bundled all-MiniLM-L6-v2). Texts are batched by length so that short sentences are not padded
    to long ones; ``precision`` is ``"fp32"`` or a resolved ``"bf16"`` (autocast on ``device``).
    ``query_prefix`` and ``passage_prefix`` are prepended to the queries and texts of
    :meth:`sentence_cosines` (E5 encoders were trained with ``"query: "`` and ``"passage: "``)."""

    def __init__(
        self,
        path: str | Path | None = None,
        batch_size: int = 128,
        max_length: int = 256,
        precision: str = "fp32",
        device: str = "cpu",
        query_prefix: str = "",
        passage_prefix: str = "",
    ):
        from transformers import AutoModel, AutoTokenizer

        if path is None:
            from pruner_model.core.modeling import default_backbone_path

            path = default_backbone_path()
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.model = AutoModel.from_pretrained(str(path)).eval().to(device)
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.precision = precision
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``[len(texts), hidden]`` float32, each row of unit length."""
        import torch

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.model.config.hidden_size), dtype=np.float32)
        with tokenizer_lock(self.tokenizer):
            ids = self.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]
        order = np.argsort([len(x) for x in ids], kind="stable")
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        pad = self.tokenizer.pad_token_id or 0
        autocast = self.precision == "bf16"
        for i in range(0, len(order), self.batch_size):
            rows = order[i : i + self.batch_size]
            width = max(len(ids[r]) for r in rows)
            batch = np.full((len(rows), width), pad, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for j, r in enumerate(rows):
                batch[j, : len(ids[r])] = ids[r]
                mask[j, : len(ids[r])] = 1
            m = torch.from_numpy(mask).to(self.device)
            kind = torch.device(self.device).type
            with torch.inference_mode(), torch.autocast(kind, dtype=torch.bfloat16, enabled=autocast):
                h = self.model(
                    input_ids=torch.from_numpy(batch).to(self.device), attention_mask=m
                ).last_hidden_state
            h = h.float()
            v = (h * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True).clamp(min=1)
            out[rows] = torch.nn.functional.normalize(v, dim=-1).cpu().numpy()
        return out

    def sentence_cosines(self, queries: Sequence[str], units: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """For each query, the cosine (in [-1, 1]) of each of its texts ``units[i]``: one call
        embeds every distinct query and text once, so batches stay full."""
        queries = [self.query_prefix + q for q in queries]
        units = [[self.passage_prefix + t for t in us] for us in units]
        index: dict[str, int] = {}  # each distinct text embedded once (a query has several passages)
        for t in [*queries, *(t for us in units for t in us)]:
            index.setdefault(t, len(index))
        e = self.embed(list(index))
        return [
            e[[index[t] for t in us]] @ e[index[q]] if us else np.zeros(0, np.float32)
            for q, us in zip(queries, units)
        ]


def passage_cosines(
    encoder: BiEncoder,
    queries: Sequence[str],
    contexts: Sequence[str],
    language: str | None = "english",
    structure: bool = True,
) -> np.ndarray:
    """Each (query, context) pair's best sentence cosine (-1 for a context with no sentence): the
    passage score the bi-encoder gives, as the inference units segment the context."""
    from pruner_model.core.segmentation import segment

    units = [[t for u in segment(c, language, structure) if (t := u.text_of(c)).strip()] for c in contexts]
    cos = encoder.sentence_cosines(queries, units)
    return np.array([float(c.max()) if len(c) else -1.0 for c in cos], dtype=np.float32)
