"""The HTTP request bodies of `pruner serve`: the prune body carries every :class:`SelectionParams`
field (generated from it, strict types as in the Python API), and validation errors name the
field without echoing the input."""

from __future__ import annotations

from pruner_model.inference.settings import selection_body_fields
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, create_model, field_validator


class Passage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = None
    title: str | None = None
    text: str


# the request body: the query, its passages and every SelectionParams field (defined once there)
PruneBody = create_model(
    "PruneBody",
    __config__=ConfigDict(extra="forbid"),
    query=(str, Field(min_length=1)),
    passages=(list[str | Passage], Field(min_length=1)),
    **selection_body_fields(),
)


class RerankDocument(BaseModel):
    """A document as Cohere's clients send it: an object with its ``text`` (other fields kept out)."""

    model_config = ConfigDict(extra="ignore")
    text: str


class RerankBody(BaseModel):
    """Cohere v1/v2 and Jina rerank bodies: ``model``, ``max_chunks_per_doc`` and
    ``max_tokens_per_doc`` are accepted (one model is served, and long documents are windowed,
    not cut); ``return_pruned`` also prunes each document at the checkpoint's settings."""

    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1)
    documents: list[str | RerankDocument] = Field(min_length=1)
    model: str | None = Field(default=None, max_length=200)
    top_n: StrictInt | None = Field(default=None, ge=1)
    return_documents: StrictBool = False
    return_pruned: StrictBool = False
    rank_fields: list[str] | None = None
    max_chunks_per_doc: StrictInt | None = Field(default=None, ge=1)
    max_tokens_per_doc: StrictInt | None = Field(default=None, ge=1)
    priority: StrictInt | None = None  # Cohere's request priority: one queue here, accepted and unused

    @field_validator("model")
    @classmethod
    def _unicode(cls, value: str | None) -> str | None:
        """The model name is echoed in the answer: it must be text JSON can carry."""
        if value is not None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("model is not valid Unicode text") from None
        return value

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]


class TeiRerankBody(BaseModel):
    """Hugging Face text-embeddings-inference's ``POST /rerank`` body."""

    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1)
    texts: list[str] = Field(min_length=1)
    raw_scores: StrictBool = False  # the relevance logit instead of its probability
    return_text: StrictBool = False
    truncate: StrictBool | None = None  # accepted: long texts are windowed, never cut
    truncation_direction: str | None = None


KNOWN_ROUTES = {
    "/v1/prune",
    "/v1/prune/batch",
    "/v1/rerank",
    "/v2/rerank",
    "/rerank",
    "/info",
    "/v1/stats",
    "/metrics",
    "/health",
    "/ready",
}


class BatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests: list[PruneBody] = Field(min_length=1)


def validation_error_detail(exc) -> str:
    """Pydantic errors as one line, ``field: error; ...``, without the offending input (it may
    not even be encodable): the same ``{"detail": "..."}`` shape as every other refusal."""
    out = []
    for e in exc.errors():
        if tuple(e.get("loc", ())) == ("body",) and e.get("type") in ("model_attributes_type", "dict_type"):
            out.append("the body must be a JSON object (content-type: application/json)")
            continue
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        msg = str(e.get("msg", "invalid"))[:200]
        out.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(out)[:1000]
