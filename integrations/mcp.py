"""An MCP server (stdio) over a pruner: an agent asks for the scored slice of context it needs
instead of whole documents (``pip install "pruner-model[mcp]"``).

``pruner mcp --model DIR [--documents docs.jsonl]`` serves:

* tool ``prune_context(query, passages, token_budget?, threshold?)``: the pruned text, the kept
  spans of each passage and the stats;
* resource ``pruner://documents``: the ids and titles of the registered documents;
* resource template ``pruner://documents/{doc_id}/slice/{query}``: the part of a registered
  document that the (URL-encoded) query needs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from urllib.parse import unquote

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pruner_model.integrations._common import load_pruner


def build_server(model, documents: list[dict] | None = None, max_passages: int = 64) -> MCPServer:
    """The MCP server for ``model`` (a ContextPruner, folder or hub id) and the registered
    ``documents`` (``{"id", "title"?, "text"}``)."""
    pruner = load_pruner(model)
    docs = {str(d["id"]): d for d in documents or []}
    server = MCPServer(
        "pruner",
        instructions="Prune retrieved passages to the sentences a question needs, or read the slice of "
        "a registered document that a question needs.",
    )

    @server.tool()
    def prune_context(
        query: str, passages: list[str], token_budget: int | None = None, threshold: float | None = None
    ) -> dict:
        """Keep only the sentences of `passages` that `query` needs. Returns the pruned `text`, the
        kept character spans [start, end, score] of each passage and token statistics."""
        if len(passages) > max_passages:
            raise ToolError(f"at most {max_passages} passages per call")
        try:
            result = pruner.prune(query, passages, token_budget=token_budget, threshold=threshold)
        except (ValueError, TypeError) as exc:  # the agent's input: it reads the reason and retries
            raise ToolError(str(exc)) from None
        s = result.stats
        return {
            "text": result.text,
            "passages": [
                {"index": i, "spans": [list(x) for x in p.spans], "relevance": p.relevance}
                for i, p in enumerate(result.passages)
            ],
            "stats": {
                "tokens_in": s.tokens_in,
                "tokens_out": s.tokens_out,
                "compression": s.compression,
                "uncertain": s.uncertain,
            },
        }

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

    return server


def mcp_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="pruner mcp",
        description="Serve a pruner as an MCP server over stdio: the tool prune_context and, with "
        "--documents, the scored slice of each registered document as a resource.",
    )
    p.add_argument("--model", required=True, help="checkpoint or ONNX export folder")
    p.add_argument("--documents", default=None, help="JSONL of {id, title?, text} to register as resources")
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
    build_server(args.model, documents).run("stdio")
    return 0
