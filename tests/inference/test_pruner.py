import json

import numpy as np
import pytest
from pruner_model.inference import ContextPruner, PruneResult

PASSAGES = [
    "Paris is the capital of France. The Eiffel Tower was built in 1889. It is made of iron.",
    {
        "id": "b",
        "title": "Berlin",
        "text": "Berlin is the capital of Germany.\n\nThe Eiffel Tower was built in 1889.",
    },
    "",
]


@pytest.fixture
def pruner(tiny_checkpoint):
    # fp32: these tests compare scores across requests and batches to the last digits
    return ContextPruner.from_pretrained(tiny_checkpoint, backend="torch", dtype="fp32")


def test_prune_result_contract(pruner):
    r = pruner.prune("When was the tower built?", PASSAGES, threshold=0.0)
    assert isinstance(r, PruneResult)
    assert [p.id for p in r.passages] == ["0", "b", "2"]
    assert r.passages[1].title == "Berlin"
    # threshold 0 keeps everything except the duplicate sentence of passage b
    assert r.stats.duplicates_removed == 1
    assert r.stats.sentences_in == 5 and r.stats.sentences_out == 4
    assert r.passages[0].text == PASSAGES[0]
    assert r.passages[1].text == "Berlin is the capital of Germany."
    assert r.passages[2].sentences == () and r.passages[2].text == ""
    assert r.text == PASSAGES[0] + "\n\n" + "Berlin is the capital of Germany."
    for p, src in zip(r.passages, [PASSAGES[0], PASSAGES[1]["text"]]):
        for s, e, score in p.spans:
            assert src[s:e].strip() == src[s:e]
            assert 0.0 <= score <= 1.0
    d = r.to_dict()
    json.dumps(d)
    assert d["passages"][0]["spans"][0][:2] == [0, len(PASSAGES[0])]
    assert 0 < r.stats.tokens_out < r.stats.tokens_in


def test_threshold_one_keeps_nothing_and_budget_holds(pruner):
    r = pruner.prune("q?", PASSAGES, threshold=1.0)
    assert r.text == "" and r.stats.tokens_out == 0 and r.stats.compression == 1.0
    r2 = pruner.prune("q?", PASSAGES, threshold=0.0, token_budget=12)
    assert 0 < r2.stats.tokens_out <= 12


def test_checkpoint_relative_floor_is_applied(pruner):
    scores = [s.score for p in pruner.prune("q?", PASSAGES[:1], threshold=0.0).passages for s in p.sentences]
    best = max(scores)
    # a floor under the best score: threshold 1 keeps exactly the request's best sentence(s)
    pruner.config.relative_floor = best / 2
    r = pruner.prune("q?", PASSAGES[:1], threshold=1.0)
    kept = [s.score for p in r.passages for s in p.sentences if s.kept]
    assert kept and all(k == best for k in kept)
    # relative scores are what the threshold sees: 0.5 keeps those with score >= best / 2
    r = pruner.prune("q?", PASSAGES[:1], threshold=0.5)
    assert [s.kept for p in r.passages for s in p.sentences] == [x >= best / 2 for x in scores]
    pruner.config.relative_floor = None
    assert pruner.prune("q?", PASSAGES[:1], threshold=1.0).stats.sentences_out == 0


def test_checkpoint_relevance_exponent_weights_sentence_scores(pruner):
    def scored(r):
        return [(s.score, p.relevance) for p in r.passages for s in p.sentences]

    plain = scored(pruner.prune("q?", PASSAGES[:2], threshold=0.0, dedup=False))
    pruner.config.relevance_exponent = 2.0
    weighted = scored(pruner.prune("q?", PASSAGES[:2], threshold=0.0, dedup=False))
    pruner.config.relevance_exponent = 0.0
    assert len(plain) == len(weighted) == 5
    for (s0, rel0), (s2, rel2) in zip(plain, weighted):
        assert rel0 == pytest.approx(rel2) and 0 < rel0 < 1
        assert s2 == pytest.approx(s0 * rel0**2)
    with pytest.raises(ValueError, match="relevance_exponent"):
        type(pruner.config)(relevance_exponent=-1.0)


def test_relevance_contrast_weights_each_request_against_its_own_best_passage(pruner):
    from pruner_model.core.score_rules import contrasted_relevance
    from pruner_model.inference.requests import PruneRequest

    def scored(r):
        return [[(s.score, p.relevance) for s in p.sentences] for p in r.passages]

    base = scored(pruner.prune("q?", PASSAGES[:2], threshold=0.0, dedup=False))
    pruner.config.relevance_exponent, pruner.config.relevance_contrast = 1.0, 2.0
    try:
        both = scored(pruner.prune("q?", PASSAGES[:2], threshold=0.0, dedup=False))
        alone = scored(pruner.prune("q?", PASSAGES[1:2], threshold=0.0, dedup=False))
        params = pruner.selection_params(threshold=0.0, dedup=False)
        # the same pair in two requests of one batch: weighted within each, encoded once
        run = pruner.run(
            [PruneRequest("q?", PASSAGES[:2], params), PruneRequest("q?", PASSAGES[1:2], params)]
        )
    finally:
        pruner.config.relevance_exponent, pruner.config.relevance_contrast = 0.0, 0.0
    rel = np.array([p[0][1] for p in base])
    assert rel[0] != rel[1]
    contrasted = contrasted_relevance(rel, 2.0)
    for pi in range(2):
        for (s0, _), (s1, r1) in zip(base[pi], both[pi]):
            assert r1 == pytest.approx(rel[pi])  # the reported relevance is the head's
            assert s1 == pytest.approx(s0 * contrasted[pi])
    # alone, passage b is its request's best: its relevance is not lowered
    assert [s for s, _ in alone[0]] == pytest.approx([s0 * rel[1] for s0, _ in base[1]])
    assert scored(run[0]) == both and scored(run[1]) == alone


def test_identical_pairs_are_encoded_once(pruner):
    from pruner_model.inference.requests import PruneRequest

    seen = []
    backend = pruner.backend

    def counting(batch):
        seen.append(batch["input_ids"].shape[0])
        return backend(batch)

    counting.input_names = backend.input_names
    pruner.backend = counting
    try:
        loose = pruner.selection_params(threshold=0.0)
        strict = pruner.selection_params(threshold=1.0)
        res = pruner.run([PruneRequest("q?", PASSAGES[:2], loose), PruneRequest("q?", PASSAGES[:2], strict)])
    finally:
        pruner.backend = backend
    assert sum(seen) == 2  # two passages, one window each, not four
    assert res[0].stats.sentences_out > 0 and res[1].stats.sentences_out == 0
    a = [s.score for p in res[0].passages for s in p.sentences]
    assert a == [s.score for p in res[1].passages for s in p.sentences]


def test_scores_do_not_depend_on_batching(pruner):
    items = [(f"question {i}?", PASSAGES[:2]) for i in range(5)]
    batch = pruner.prune_batch(items, threshold=0.5)
    single = [pruner.prune(q, ps, threshold=0.5) for q, ps in items]
    for a, b in zip(batch, single):
        sa = [s.score for p in a.passages for s in p.sentences]
        sb = [s.score for p in b.passages for s in p.sentences]
        assert np.allclose(sa, sb, atol=1e-5)


def test_long_passage_gets_every_sentence_scored(pruner):
    long = " ".join(f"Fact {i} is about item {i * 3}." for i in range(200))
    r = pruner.prune("what about item 42?", [long], threshold=0.5)
    sents = r.passages[0].sentences
    assert len(sents) == 200
    assert all(s.tokens > 0 for s in sents)
    assert len({round(s.score, 6) for s in sents}) > 1


def test_bad_inputs(pruner):
    with pytest.raises(ValueError):
        pruner.prune("  ", PASSAGES)
    with pytest.raises(TypeError):
        pruner.prune("q", [3])
    with pytest.raises(ValueError):
        pruner.prune("q", [{"title": "no text"}])
    with pytest.raises(ValueError):
        pruner.prune("q", PASSAGES, threshold=2.0)


def test_missing_model_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        ContextPruner.from_pretrained(tmp_path / "nope")


def test_uncertain_queries_are_flagged_and_can_keep_everything(tiny_checkpoint):
    pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    sure = pruner.prune("q?", PASSAGES, threshold=1.0, uncertain_below=0.0)
    assert not sure.stats.uncertain and sure.stats.sentences_out == 0
    assert sure.stats.confidence == pytest.approx(max(s.score for p in sure.passages for s in p.sentences))
    flagged = pruner.prune("q?", PASSAGES, threshold=1.0, uncertain_below=1.0)
    assert flagged.stats.uncertain and flagged.stats.sentences_out == 0  # flag only, by default
    fallback = pruner.prune("q?", PASSAGES, threshold=1.0, uncertain_below=1.0, if_uncertain="keep_all")
    assert fallback.stats.uncertain and fallback.stats.sentences_out == fallback.stats.sentences_in
    assert fallback.to_dict()["stats"]["uncertain"] is True
    with pytest.raises(ValueError, match="if_uncertain must be one of flag, keep_all"):
        pruner.prune("q?", PASSAGES, if_uncertain="maybe")


def test_keep_all_stays_within_the_token_budgets(tiny_checkpoint):
    pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    everything = dict(threshold=1.0, uncertain_below=1.0, if_uncertain="keep_all")
    whole = pruner.prune("q?", PASSAGES, **everything)
    assert whole.stats.tokens_out > 20
    capped = pruner.prune("q?", PASSAGES, token_budget=20, **everything)
    assert capped.stats.uncertain and 0 < capped.stats.tokens_out <= 20
    per = pruner.prune("q?", PASSAGES, per_passage_budget=10, **everything)
    assert all(sum(s.tokens for s in p.sentences if s.kept) <= 10 for p in per.passages)


def test_a_budget_bounds_characters_the_tokenizer_drops(tiny_checkpoint):
    """Zero-width spaces, combining marks and controls count no tokens: they still count against
    the budget, so a small budget can never return kilobytes."""
    pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    invisible = "\u200b" * 9000 + "\u0301" * 3000 + "\x01" * 2000 + "\U000e0041" * 1000
    passages = [
        f"The tower is tall.{invisible}",
        "Iron is a metal." + "\u202e" * 4000,
        "It was built in 1889.",
    ]
    out = pruner.prune("When was the tower built?", passages, threshold=0.0, token_budget=10)
    assert "1889" in out.text and len(out.text) <= 16 * 10
    assert out.stats.tokens_out <= 10


def test_must_keep_is_matched_when_prepared_and_never_in_the_batch(tiny_checkpoint, monkeypatch):
    """Pattern matching runs where a request is prepared (a server's worker thread), against a
    deadline the queries of one HTTP request share; the encoder's batch only reads the result."""
    import time

    import pruner_model.inference.selection as selection
    from pruner_model.inference.requests import PruneRequest

    pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    params = pruner.selection_params(threshold=1.0, must_keep=(r"\d{4}",))
    prepared = pruner.prepare(PruneRequest("q?", PASSAGES, params))
    assert prepared.forced is not None and prepared.forced.sum() == 2  # the two sentences with 1889

    def never(*a, **k):
        raise AssertionError("must_keep matched inside the batch")

    monkeypatch.setattr(selection, "must_keep", never)
    (result,) = pruner.run([prepared])
    assert "1889" in result.text  # kept by the pattern alone (threshold 1.0; the repeat is deduplicated)
    with pytest.raises(ValueError, match="ran over"):  # a deadline already spent by earlier queries
        pruner.prepare(PruneRequest("q?", PASSAGES, params), must_keep_deadline=time.monotonic() - 1)
