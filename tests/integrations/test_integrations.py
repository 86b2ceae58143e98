"""Framework adapters against the real libraries, on a tiny model."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from urllib.parse import quote

import pytest

from pruner_model import ContextPruner

pytestmark = pytest.mark.slow
QUERY = "When was the tower built?"
TEXTS = [
    "The tower was built in 1889. It is made of iron. Visitors climb it every day.",
    "Bananas are yellow. They grow in warm places.",
]


@pytest.fixture
def pruner(tiny_checkpoint):
    return ContextPruner.from_pretrained(tiny_checkpoint)


def expected(pruner, **kw):
    return pruner.prune(QUERY, [{"id": str(i), "text": t} for i, t in enumerate(TEXTS)], **kw)


def test_langchain_compressor(pruner, tiny_checkpoint):
    from langchain_core.documents import BaseDocumentCompressor, Document
    from pruner_model.integrations.langchain import PrunerCompressor

    docs = [Document(page_content=t, metadata={"source": f"s{i}"}) for i, t in enumerate(TEXTS)]
    comp = PrunerCompressor(model=pruner, threshold=0.5, drop_empty=False)
    assert isinstance(comp, BaseDocumentCompressor)
    out = comp.compress_documents(docs, QUERY)
    ref = expected(pruner, threshold=0.5)
    assert [d.page_content for d in out] == [p.text for p in ref.passages]
    assert all(d.metadata["source"] == f"s{i}" for i, d in enumerate(out))  # original metadata kept
    assert out[0].metadata["pruner_spans"] == [list(s) for s in ref.passages[0].spans]
    assert len(out[0].metadata["pruner_sentence_scores"]) == 3
    # pruned to nothing: dropped by default
    none = PrunerCompressor.from_pretrained(tiny_checkpoint, threshold=1.0).compress_documents(docs, QUERY)
    assert none == []
    some = PrunerCompressor(model=pruner, threshold=1.0, selection={"must_keep": ["1889"]})
    kept = asyncio.run(some.acompress_documents(docs, QUERY))
    assert [d.page_content for d in kept] == ["The tower was built in 1889."]


def test_llama_index_postprocessor(pruner):
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from pruner_model.integrations.llama_index import PrunerPostprocessor

    nodes = [
        NodeWithScore(node=TextNode(text=t, metadata={"file": f"f{i}"}), score=1.0 - i / 10)
        for i, t in enumerate(TEXTS)
    ]
    post = PrunerPostprocessor(model=pruner, threshold=1.0, selection={"must_keep": ["1889", "yellow"]})
    assert isinstance(post, BaseNodePostprocessor)
    out = post.postprocess_nodes(nodes, query_bundle=QueryBundle(QUERY))
    assert [n.node.get_content() for n in out] == ["The tower was built in 1889.", "Bananas are yellow."]
    assert out[0].node.metadata["file"] == "f0" and out[0].score == 1.0
    assert "pruner_spans" in out[1].node.metadata
    assert nodes[0].node.get_content() == TEXTS[0]  # the input nodes are not modified
    assert (
        post.postprocess_nodes(nodes, query_str=QUERY)[0].node.get_content() == "The tower was built in 1889."
    )
    assert PrunerPostprocessor(model=pruner, threshold=1.0).postprocess_nodes(nodes, query_str=QUERY) == []
    with pytest.raises(ValueError, match="needs the query"):
        post.postprocess_nodes(nodes)


def test_haystack_component_in_a_pipeline(pruner, tiny_checkpoint):
    from haystack import Document, Pipeline
    from pruner_model.integrations.haystack import PrunerComponent

    comp = PrunerComponent(model=str(tiny_checkpoint), threshold=1.0, selection={"must_keep": ["1889"]})
    pipe = Pipeline()
    pipe.add_component("pruner", comp)
    docs = [Document(content=t, meta={"k": i}) for i, t in enumerate(TEXTS)]
    out = pipe.run({"pruner": {"query": QUERY, "documents": docs}})["pruner"]["documents"]
    assert [d.content for d in out] == ["The tower was built in 1889."]
    assert out[0].meta["k"] == 0 and "pruner_relevance" in out[0].meta
    # serialization round trip, in a pipeline too
    again = PrunerComponent.from_dict(comp.to_dict())
    assert again.model == str(tiny_checkpoint) and again.selection == {"must_keep": ["1889"]}
    pipe2 = Pipeline.loads(pipe.dumps(), allowed_modules=["pruner_model.integrations.haystack"])
    out2 = pipe2.run({"pruner": {"query": QUERY, "documents": docs}})["pruner"]["documents"]
    assert [d.content for d in out2] == [d.content for d in out]


def test_mcp_stdio_server_tool_and_resources(tiny_checkpoint, tmp_path):
    from mcp import Client, StdioServerParameters

    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        "".join(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS))
    )
    elsewhere = tmp_path / "elsewhere"  # started from another folder: absolute paths are all it needs
    elsewhere.mkdir()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pruner_model.cli", "mcp", "--model", str(tiny_checkpoint), "--documents", str(docs)],
        cwd=str(elsewhere),
        # the test session's export cache and int8 setting (mcp passes only PATH, HOME, ...)
        env=dict(os.environ),
    )

    async def session():
        async with Client(params, read_timeout_seconds=120) as client:
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == ["prune_context"]
            (tool,) = tools.tools
            # the selection settings are tool arguments, and the output is structured
            assert {"threshold", "token_budget", "neighbors", "keep_top", "must_keep"} <= set(
                tool.input_schema["properties"]
            )
            assert {"text", "passages", "stats"} <= set(tool.output_schema["properties"])
            res = await client.call_tool(
                "prune_context", {"query": QUERY, "passages": TEXTS, "threshold": 0.0}
            )
            assert not res.is_error, res
            payload = res.structured_content
            objects = [{"id": f"p{i}", "title": "T", "text": t} for i, t in enumerate(TEXTS)]
            top = await client.call_tool(
                "prune_context", {"query": QUERY, "passages": objects, "threshold": 1.0, "keep_top": 1}
            )
            assert not top.is_error, top
            kept = [p for p in top.structured_content["passages"] if p["spans"]]
            assert len(kept) == 1 and kept[0]["id"] in {o["id"] for o in objects}
            listed = await client.read_resource("pruner://documents")
            slice_ = await client.read_resource(f"pruner://documents/d0/slice/{quote(QUERY, safe='')}")
            # errors reach the agent with their reason, not only "Error executing tool"
            bad = await client.call_tool("prune_context", {"query": "   ", "passages": TEXTS})
            assert bad.is_error and "query is empty" in bad.content[0].text
            budget = await client.call_tool(
                "prune_context", {"query": QUERY, "passages": TEXTS, "token_budget": -1}
            )
            assert budget.is_error and "token_budget" in budget.content[0].text
            # an agent cannot make the server load a tokenizer folder of its choosing
            foreign = await client.call_tool(
                "prune_context", {"query": QUERY, "passages": TEXTS, "budget_tokenizer": str(tiny_checkpoint)}
            )
            assert foreign.is_error and "not served here" in foreign.content[0].text
            # a misspelt setting is refused by name, not silently dropped
            typo = await client.call_tool(
                "prune_context", {"query": QUERY, "passages": TEXTS, "thresold": 0.9}
            )
            assert typo.is_error and "thresold" in typo.content[0].text
            try:
                await client.read_resource("pruner://documents/nope/slice/q")
                missing = ""
            except Exception as exc:  # the client raises the server's resource error
                missing = str(exc)
            assert "no registered document 'nope'" in missing
            return payload, json.loads(listed.contents[0].text), slice_.contents[0].text

    payload, listed, text = asyncio.run(session())
    pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    ref = pruner.prune(QUERY, TEXTS, threshold=0.0)
    assert payload["text"] == ref.text and payload["stats"]["tokens_in"] == ref.stats.tokens_in
    assert [p["spans"] for p in payload["passages"]] == [[list(s) for s in p.spans] for p in ref.passages]
    assert listed == [{"id": "d0", "title": "T0"}, {"id": "d1", "title": "T1"}]
    assert text == pruner.prune(QUERY, [TEXTS[0]]).text


def test_mcp_quantized_needs_an_onnx_folder(tiny_checkpoint):
    from pruner_model.integrations.mcp import build_server

    with pytest.raises(Exception, match="(?i)onnx|int8"):
        build_server(str(tiny_checkpoint), quantized=True)


def test_integration_docs_examples_run(tiny_checkpoint, capsys, tmp_path, monkeypatch):
    import re
    from pathlib import Path

    monkeypatch.chdir(tmp_path)  # from a folder that is not the repository
    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 3
    for block in blocks:
        exec(compile(block, "integrations.md", "exec"), {"MODEL": str(tiny_checkpoint)})
    assert "Question: When was the Eiffel Tower built?" in capsys.readouterr().out
