"""An MCP server (stdio) over a pruner: an agent asks for the scored slice of context it needs
instead of whole documents (``pip install "pruner-model[mcp]"``).

``pruner mcp --model DIR [--documents docs.jsonl]`` serves:

* tool ``prune_context(query, passages, <every selection setting>?)``: passages as strings or
  ``{id?, title?, text}``; the settings are the same as ``pruner prune``'s flags and the HTTP
  body's fields (``threshold``, ``token_budget``, ``neighbors``, ``must_keep``, ...). It returns
  structured output: the pruned text, each passage's kept spans and relevance, and the stats;
* resource ``pruner://documents``: the ids and titles of the registered documents;
* resource template ``pruner://documents/{doc_id}/slice/{query}``: the part of a registered
  document that the (URL-encoded) query needs.
"""

from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path
from typing import Annotated
from urllib.parse import unquote

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pruner_model.inference.budget import check_served, served_counters
from pruner_model.inference.settings import selection_body_fields
from pruner_model.integrations._common import load_pruner
from pydantic import BaseModel, ConfigDict, Field


class Passage(BaseModel):
    """A passage as an object: its text, with an id and title if the caller has them."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = None
    title: str | None = None
    text: str


class PassageOut(BaseModel):
    index: int
    id: str | None = None
    spans: list[tuple[int, int, float]] = Field(description="kept character spans [start, end, score]")
    relevance: float = Field(description="the passage's relevance probability")


class PruneStatsOut(BaseModel):
    tokens_in: int
    tokens_out: int
    compression: float
    uncertain: bool


class PruneOutput(BaseModel):
    """What ``prune_context`` returns (the MCP tool's structured output)."""

    text: str = Field(description="the pruned context to read, passages in order")
    passages: list[PassageOut]
    stats: PruneStatsOut


def _tool_signature() -> inspect.Signature:
    """``(query, passages, <every SelectionParams field>) -> PruneOutput``: the tool's arguments
    come from the same settings as the CLI flags and the HTTP body."""
    params = [
        inspect.Parameter("query", inspect.Parameter.KEYWORD_ONLY, annotation=str),
        inspect.Parameter(
            "passages",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[
                list[str | Passage], Field(description="passages as strings or {id?, title?, text}")
            ],
        ),
    ]
    for name, (typ, info) in selection_body_fields().items():
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=Annotated[typ, Field(description=info.description)],
                default=info.default,
            )
        )
    return inspect.Signature(params, return_annotation=PruneOutput)


def build_server(
    model,
    documents: list[dict] | None = None,
    max_passages: int = 64,
    budget_tokenizers: tuple[str, ...] = (),
    **loader,
) -> MCPServer:
    """The MCP server for ``model`` (a ContextPruner, folder or hub id, loaded with ``loader``
    options such as ``quantized=True``) and the registered ``documents`` (``{"id", "title"?,
    "text"}``). ``budget_tokenizers``: the ``budget_tokenizer`` names a call may choose (loaded
    now), as the HTTP server allows: an agent cannot make it load a folder or hub id of its own."""
    served = served_counters(budget_tokenizers)
    pruner = load_pruner(model, **loader)
    docs = {str(d["id"]): d for d in documents or []}
    server = MCPServer(
        "pruner",
        instructions="Prune retrieved passages to the sentences a question needs, or read the slice of "
        "a registered document that a question needs.",
    )

    def prune_context(query: str, passages: list, **settings) -> PruneOutput:
        """Keep only the sentences of `passages` that `query` needs. Returns the pruned `text`, the
        kept character spans [start, end, score] and relevance of each passage, and token
        statistics. Settings left out take the checkpoint's calibrated values."""
        if len(passages) > max_passages:
            raise ToolError(f"at most {max_passages} passages per call")
        given = [p if isinstance(p, str) else p.model_dump(exclude_none=True) for p in passages]
        defaults = {name: info.default for name, (_, info) in selection_body_fields().items()}
        changed = {k: v for k, v in settings.items() if v != defaults.get(k)}
        try:
            check_served(changed.get("budget_tokenizer"), served)
            result = pruner.prune(query, given, **changed)
        except (ValueError, TypeError) as exc:  # the agent's input: it reads the reason and retries
            raise ToolError(str(exc)) from None
        s = result.stats
        return PruneOutput(
            text=result.text,
            passages=[
                PassageOut(index=i, id=p.id, spans=[tuple(x) for x in p.spans], relevance=p.relevance)
                for i, p in enumerate(result.passages)
            ],
            stats=PruneStatsOut(
                tokens_in=s.tokens_in,
                tokens_out=s.tokens_out,
                compression=s.compression,
                uncertain=s.uncertain,
            ),
        )

    prune_context.__signature__ = _tool_signature()
    server.tool(structured_output=True)(prune_context)
    _forbid_unknown_arguments(server, "prune_context")
    _add_documents(server, pruner, docs)
    return server


def _forbid_unknown_arguments(server: MCPServer, name: str) -> None:
    """A misspelt setting (``thresold``) is an error the agent reads, not silently dropped: the
    tool's argument model (the SDK builds it with pydantic's default ``extra="ignore"``) is made
    strict."""
    tool = server._tool_manager.get_tool(name)  # the SDK has no public way to set this
    base = tool.fn_metadata.arg_model

    class Strict(base):
        model_config = ConfigDict(**base.model_config, extra="forbid")

    Strict.__name__ = base.__name__
    tool.fn_metadata.arg_model = Strict


def _add_documents(server: MCPServer, pruner, docs: dict[str, dict]) -> None:
    """The registered documents as resources: their list, and the slice a query needs."""

    @server.resource("pruner://documents", mime_type="application/json")
    def list_documents() -> str:
        """The registered documents (id and title)."""
        return json.dumps([{"id": k, "title": d.get("title")} for k, d in docs.items()])

    @server.resource("pruner://documents/{doc_id}/slice/{query}", mime_type="text/plain")
    def document_slice(doc_id: str, query: str) -> str:
        """The sentences of a registered document that the URL-encoded query needs."""
        doc = docs.get(unquote(doc_id))
        if doc is None:
            raise ResourceError(f"no registered document {unquote(doc_id)!r} (list: pruner://documents)")
        try:
            return pruner.prune(unquote(query), [{"id": doc_id, "text": doc["text"]}]).text
        except (ValueError, TypeError) as exc:
            raise ResourceError(str(exc)) from None


def mcp_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="pruner mcp",
        description="Serve a pruner as an MCP server over stdio: the tool prune_context and, with "
        "--documents, the scored slice of each registered document as a resource.",
    )
    p.add_argument("--model", required=True, help="checkpoint or ONNX export folder")
    p.add_argument("--documents", default=None, help="JSONL of {id, title?, text} to register as resources")
    p.add_argument(
        "--quantized", action="store_true", help="serve an ONNX folder's int8 graph (model.int8.onnx)"
    )
    p.add_argument("--backend", choices=["auto", "torch", "onnx"], default=None)
    p.add_argument("--dtype", choices=["auto", "fp32", "bf16", "fp16"], default=None)
    p.add_argument(
        "--budget-tokenizer",
        action="append",
        default=[],
        metavar="NAME",
        help="a budget_tokenizer calls may choose (repeatable; e.g. cl100k_base or a tokenizer folder); "
        "any other is refused",
    )
    args = p.parse_args(argv)
    if not Path(args.model).is_dir():
        raise FileNotFoundError(f"model folder not found: {args.model}")
    documents = None
    if args.documents:
        from pruner_model.core.records import read_jsonl

        documents = read_jsonl(args.documents)
        for i, d in enumerate(documents, 1):
            if "id" not in d or not isinstance(d.get("text"), str):
                raise ValueError(f"{args.documents}:{i}: expected {{id, title?, text}}")
    loader = {"quantized": args.quantized or None, "backend": args.backend, "dtype": args.dtype}
    build_server(args.model, documents, budget_tokenizers=tuple(args.budget_tokenizer), **loader).run("stdio")
    return 0
