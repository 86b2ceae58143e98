"""The rerank routes, for clients written for other rerankers: Cohere v1/v2 and Jina
(``POST /v1/rerank``, ``POST /v2/rerank``), Hugging Face text-embeddings-inference
(``POST /rerank``, ``GET /info``). Relevance is the relevance head's, in the order of
:meth:`ContextPruner.rank <pruner_model.inference.ContextPruner.rank>`."""

from __future__ import annotations

import math
import uuid

from pruner_model.serving.schemas import RerankBody, TeiRerankBody
from pruner_model.serving.state import Served


def rerank_router(served: Served):
    from fastapi import APIRouter

    from pruner_model import __version__

    router = APIRouter()
    pruner, limits = served.pruner, served.limits

    async def rerank_scores(query: str, documents: list[str], pruned: bool):
        """Relevance of each document, and the pruned result when asked."""
        request = await served.off_loop(served.checks.rerank, query, documents)
        if pruned:
            result = (await served.within_deadline(served.batcher.submit([request])))[0]
            return [p.relevance for p in result.passages], result
        ranked = await served.within_deadline(served.off_loop(pruner.rank, query, list(documents)))
        relevance = [0.0] * len(documents)
        for r in ranked:
            relevance[r.index] = r.relevance
        return relevance, None

    @router.post("/v1/rerank")
    @router.post("/v2/rerank")
    async def rerank(body: RerankBody):
        """Cohere (v1, v2) and Jina rerank: ``{"results": [{"index", "relevance_score", ...}]}``."""
        documents = body.texts()
        relevance, result = await rerank_scores(body.query, documents, body.return_pruned)
        return {
            "id": uuid.uuid4().hex,
            "model": body.model or pruner.config.name_or_path or "pruner",
            "results": _rerank_results(body, documents, relevance, result),
            "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
        }

    @router.post("/rerank")
    async def tei_rerank(body: TeiRerankBody):
        """Text-embeddings-inference rerank: ``[{"index", "score", "text"?}]``, best first."""
        relevance, _ = await rerank_scores(body.query, body.texts, False)
        out = []
        for i in sorted(range(len(relevance)), key=lambda i: -relevance[i]):
            score = _logit(relevance[i]) if body.raw_scores else relevance[i]
            out.append({"index": i, "score": score, **({"text": body.texts[i]} if body.return_text else {})})
        return out

    @router.get("/info")
    async def info():
        """Text-embeddings-inference's model description, for clients that read it."""
        cfg = pruner.config
        return {
            "model_id": cfg.name_or_path or "pruner",
            "model_type": {"reranker": {"id2label": {"0": "relevance"}}},
            "model_dtype": pruner.precision,
            "backend": pruner.backend.name,
            "max_input_length": cfg.max_length,
            "max_client_batch_size": limits.max_passages,
            "max_batch_tokens": limits.max_request_tokens,
            "threshold": cfg.threshold,
            "version": __version__,
        }

    return router


def _logit(p: float) -> float:
    p = min(max(p, 1e-7), 1 - 1e-7)
    return float(math.log(p / (1 - p)))


def _rerank_results(body: RerankBody, documents: list[str], relevance: list[float], pruned) -> list[dict]:
    order = sorted(range(len(relevance)), key=lambda i: -relevance[i])[: body.top_n]
    results = []
    for i in order:
        item = {"index": i, "relevance_score": relevance[i]}
        if body.return_documents:
            item["document"] = {"text": documents[i]}
        if pruned is not None:
            item["pruned_text"] = pruned.passages[i].text
        results.append(item)
    return results
