"""The adapters as rerankers (top_n, order and score where each framework expects it), serving
an ONNX folder's int8 graph, and refusing settings they would otherwise ignore."""

from __future__ import annotations

import pytest

from pruner_model import ContextPruner

pytestmark = pytest.mark.slow
QUERY = "When was the tower built?"
TEXTS = [
    "Bananas are yellow. They grow in warm places.",
    "The tower was built in 1889. It is made of iron.",
    "Paris is in France. It lies on the Seine.",
]


@pytest.fixture(scope="module")
def int8_folder(tmp_path_factory, checkpoint):
    from pruner_model.export.onnx import export_onnx

    out = tmp_path_factory.mktemp("onnx") / "export"
    export_onnx(checkpoint, out, quantize="int8", validate=False)
    return out


@pytest.fixture(scope="module")
def pruner(checkpoint):
    return ContextPruner.from_pretrained(checkpoint)


def relevance_order(pruner) -> list[int]:
    r = pruner.prune(QUERY, [{"id": str(i), "text": t} for i, t in enumerate(TEXTS)], threshold=0.0)
    return sorted(range(len(TEXTS)), key=lambda i: -r.passages[i].relevance)


def test_langchain_reranks_with_top_n_and_relevance_score(pruner, int8_folder):
    from langchain_core.documents import Document
    from pruner_model.integrations.langchain import PrunerCompressor

    docs = [Document(page_content=t, metadata={"n": i}) for i, t in enumerate(TEXTS)]
    out = PrunerCompressor(model=pruner, threshold=0.0, top_n=2).compress_documents(docs, QUERY)
    order = relevance_order(pruner)
    assert [d.metadata["n"] for d in out] == order[:2]
    scores = [d.metadata["relevance_score"] for d in out]
    assert scores == sorted(scores, reverse=True)
    int8 = PrunerCompressor.from_pretrained(int8_folder, quantized=True, threshold=0.0)
    assert int8.model.precision == "int8" and len(int8.compress_documents(docs, QUERY)) == 3
    with pytest.raises(TypeError, match="unknown setting 'tokens_budget'"):
        PrunerCompressor(model=pruner, tokens_budget=5)
    with pytest.raises(ValueError, match="threshold is set twice"):
        PrunerCompressor(model=pruner, threshold=0.2, selection={"threshold": 0.5})
    with pytest.raises(TypeError, match="unknown selection setting"):
        PrunerCompressor(model=pruner, selection={"must_keeps": ["x"]})


def test_llama_index_reranks_and_scores_nodes(pruner, int8_folder):
    from llama_index.core.schema import NodeWithScore, TextNode
    from pruner_model.integrations.llama_index import PrunerPostprocessor

    nodes = [NodeWithScore(node=TextNode(text=t, metadata={"n": i}), score=0.5) for i, t in enumerate(TEXTS)]
    out = PrunerPostprocessor(model=pruner, threshold=0.0, top_n=1).postprocess_nodes(nodes, query_str=QUERY)
    assert [n.node.metadata["n"] for n in out] == relevance_order(pruner)[:1]
    assert out[0].score == pytest.approx(out[0].node.metadata["pruner_relevance"])
    keep = PrunerPostprocessor(model=pruner, threshold=0.0).postprocess_nodes(nodes, query_str=QUERY)
    assert [n.score for n in keep] == [0.5, 0.5, 0.5]  # without top_n the retriever's score stays
    # offsets into the source document: cleared on a pruned node, the originals kept in metadata
    text = TEXTS[0]
    placed = [NodeWithScore(node=TextNode(text=text, start_char_idx=100, end_char_idx=100 + len(text)))]
    (cut,) = PrunerPostprocessor(model=pruner, threshold=1.0, drop_empty=False).postprocess_nodes(
        placed, query_str=QUERY
    )
    assert cut.node.text != text and cut.node.start_char_idx is None and cut.node.end_char_idx is None
    assert cut.node.metadata["pruner_original_start_char_idx"] == 100
    assert cut.node.metadata["pruner_original_end_char_idx"] == 100 + len(text)
    (whole,) = PrunerPostprocessor(model=pruner, threshold=0.0).postprocess_nodes(placed, query_str=QUERY)
    assert whole.node.text == text and whole.node.start_char_idx == 100  # nothing cut: still true
    int8 = PrunerPostprocessor.from_pretrained(int8_folder, quantized=True, threshold=0.0)
    assert int8._pruner.precision == "int8"
    with pytest.raises(TypeError, match="unknown setting 'top_k'"):
        PrunerPostprocessor(model=pruner, top_k=2)


def test_haystack_ranks_and_serializes_its_loader_options(pruner, int8_folder):
    from haystack import Document
    from pruner_model.integrations.haystack import PrunerComponent

    docs = [Document(content=t, meta={"n": i}) for i, t in enumerate(TEXTS)]
    comp = PrunerComponent(model=str(int8_folder), quantized=True, threshold=0.0, top_n=2)
    out = comp.run(QUERY, docs)["documents"]
    assert comp._pruner.precision == "int8" and len(out) == 2
    assert out[0].score >= out[1].score and out[0].score == pytest.approx(out[0].meta["relevance_score"])
    again = PrunerComponent.from_dict(comp.to_dict())
    assert again.quantized is True and again.top_n == 2
    for quantized in (None, False):  # an export written with --no-validate: fp32 unless int8 is asked for
        plain = PrunerComponent(model=str(int8_folder), quantized=quantized, threshold=0.0)
        plain.warm_up()
        assert plain._pruner.precision == "fp32"
    with pytest.raises(TypeError, match="unknown selection setting"):
        PrunerComponent(model=str(int8_folder), selection={"tokens_budget": 3})


def test_ray_predictor_takes_loader_options(int8_folder):
    from pruner_model.integrations.ray import PrunerPredictor

    pred = PrunerPredictor(str(int8_folder), quantized=True, token_budget=20)
    assert pred.pruner.precision == "int8"
    out = pred({"query": [QUERY], "passages": [TEXTS]})
    assert out["tokens_out"][0] <= 20


def test_framework_details_serialize_share_and_pass_on(checkpoint):
    import json
    import threading

    from haystack import Document
    from pruner_model.integrations.haystack import PrunerComponent
    from pruner_model.integrations.langchain import PrunerCompressor

    comp = PrunerCompressor.from_pretrained(checkpoint, top_n=1)
    dumped = json.loads(comp.model_dump_json())  # was: Unable to serialize unknown type: ContextPruner
    assert dumped["model"] == str(checkpoint) and dumped["top_n"] == 1
    a, b = PrunerComponent(model=str(checkpoint), threshold=0.0), PrunerComponent(model=str(checkpoint))
    threads = [threading.Thread(target=c.warm_up) for c in (a, b, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert a._pruner is b._pruner  # one model per (folder, options), however the threads raced
    table = Document(content=None, meta={"kind": "table"})
    out = a.run(QUERY, [table, Document(content=TEXTS[1])])["documents"]
    assert out[0] is table and len(out) == 2  # a document without text is passed on untouched
    assert a.run(QUERY, [table])["documents"] == [table]


def test_llama_index_round_trips_through_to_dict(checkpoint, int8_folder):
    from pruner_model.integrations.llama_index import PrunerPostprocessor

    post = PrunerPostprocessor.from_pretrained(int8_folder, quantized=True, top_n=2, threshold=0.0)
    again = PrunerPostprocessor.from_dict(post.to_dict())  # was: missing model
    assert again.model == str(int8_folder) and again.top_n == 2 and again._pruner.precision == "int8"
