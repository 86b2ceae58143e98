"""The HTTP request bodies of `pruner serve`: the prune body carries every :class:`SelectionParams`
field (generated from it, strict types as in the Python API), and validation errors name the
field without echoing the input."""

from __future__ import annotations

from pruner_model.inference.settings import selection_body_fields
from pydantic import BaseModel, ConfigDict, Field, create_model


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


class RerankBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1)
    documents: list[str] = Field(min_length=1)
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False
    return_pruned: bool = False  # also prune each document (selection at the checkpoint's settings)


KNOWN_ROUTES = {"/v1/prune", "/v1/prune/batch", "/v1/rerank", "/v1/stats", "/metrics", "/health"}


class BatchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests: list[PruneBody] = Field(min_length=1)


def validation_error_detail(exc) -> list[dict]:
    """Pydantic errors without the offending input (it may not even be encodable)."""
    out = []
    for e in exc.errors():
        if tuple(e.get("loc", ())) == ("body",) and e.get("type") in ("model_attributes_type", "dict_type"):
            out.append(
                {"field": "", "error": "the body must be a JSON object (content-type: application/json)"}
            )
            continue
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        out.append({"field": loc, "error": str(e.get("msg", "invalid"))[:200]})
    return out
