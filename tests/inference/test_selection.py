import numpy as np
import pytest
from pruner_model.inference.selection import (
    Units,
    continue_answers,
    drop_duplicates,
    expand_neighbors,
    keep_headings,
    keep_top,
    merge_spans,
    pack_budget,
    select,
)
from pruner_model.inference.settings import SelectionParams


def make_units(scores, passage=None, paragraph=None, heading=None, tokens=None, texts=None, relevance=None):
    n = len(scores)
    passage = np.zeros(n, int) if passage is None else np.asarray(passage)
    return Units(
        scores=np.asarray(scores, float),
        passage=passage,
        paragraph=np.zeros(n, int) if paragraph is None else np.asarray(paragraph),
        heading=np.full(n, -1) if heading is None else np.asarray(heading),
        tokens=np.full(n, 10) if tokens is None else np.asarray(tokens),
        texts=[f"unit {i}" for i in range(n)] if texts is None else texts,
        relevance=np.ones(passage.max() + 1) if relevance is None else np.asarray(relevance),
    )


def test_threshold():
    u = make_units([0.1, 0.6, 0.5, 0.49])
    keep, _ = select(u, SelectionParams(threshold=0.5))
    assert keep.tolist() == [False, True, True, False]


def test_relative_threshold():
    # scores over max(floor, best): best 0.8 -> [1, 0.75, 0.5, 0.125]
    u = make_units([0.8, 0.6, 0.4, 0.1])
    keep, _ = select(u, SelectionParams(threshold=0.5, relative_floor=0.2))
    assert keep.tolist() == [True, True, True, False]
    # a request whose best is under the floor is scaled by 1/floor: [0.5, 0.25]
    u = make_units([0.1, 0.05])
    keep, _ = select(u, SelectionParams(threshold=0.5, relative_floor=0.2))
    assert keep.tolist() == [True, False]
    with pytest.raises(ValueError, match="relative_floor"):
        SelectionParams(threshold=0.5, relative_floor=0.0)


def test_keep_top_survives_threshold():
    u = make_units([0.1, 0.3, 0.2])
    assert keep_top(u, np.zeros(3, bool), 2).tolist() == [False, True, True]
    keep, _ = select(u, SelectionParams(threshold=0.9, keep_top=1))
    assert keep.tolist() == [False, True, False]


def test_neighbors_stay_inside_paragraph_and_passage():
    u = make_units([0] * 7, passage=[0, 0, 0, 0, 1, 1, 1], paragraph=[0, 0, 1, 1, 0, 0, 0])
    keep = np.array([False, True, False, False, False, False, True])
    out = expand_neighbors(u, keep, 1)
    assert out.tolist() == [True, True, False, False, False, True, True]
    out2 = expand_neighbors(u, np.array([False] * 4 + [True, False, False]), 2)
    assert out2.tolist() == [False] * 4 + [True, True, True]


def test_continuation_follows_an_answer_along_its_paragraph():
    # a kept sentence (0.9) followed by the rest of its answer (0.3, 0.2), then a weak one (0.05);
    # a second paragraph and passage start with 0.4 but touch no kept unit
    scores = [0.1, 0.9, 0.3, 0.2, 0.05, 0.4, 0.4]
    u = make_units(scores, passage=[0, 0, 0, 0, 0, 0, 1], paragraph=[0, 0, 0, 0, 0, 1, 0])
    keep, _ = select(u, SelectionParams(threshold=0.5))
    assert keep.tolist() == [False, True, False, False, False, False, False]
    keep, _ = select(u, SelectionParams(threshold=0.5, continuation=0.3))  # reach: scores >= 0.15
    assert keep.tolist() == [False, True, True, True, False, False, False]
    keep, _ = select(u, SelectionParams(threshold=0.5, continuation=0.5))  # reach 0.25: stops at 0.2
    assert keep.tolist() == [False, True, True, False, False, False, False]
    # nothing kept, nothing to continue; several thresholds' masks at once, column by column
    assert not continue_answers(u, np.zeros(7, bool), np.ones(7, bool)).any()
    s = np.asarray(scores)
    keep, reach = s[:, None] >= np.array([0.5, 0.35]), s[:, None] >= np.array([0.15, 0.1])
    both = continue_answers(u, keep, reach)
    for k in range(2):
        assert both[:, k].tolist() == continue_answers(u, keep[:, k], reach[:, k]).tolist()
    assert both[:, 1].tolist() == [True, True, True, True, False, True, True]
    with pytest.raises(ValueError, match="continuation"):
        SelectionParams(continuation=1.5)


def test_heading_retention_is_recursive():
    # 0: "# A", 1: "## B" (under 0), 2: sentence under 1, 3: sentence under 0
    u = make_units([0, 0, 0.9, 0], heading=[-1, 0, 1, 0])
    out = keep_headings(u, np.array([False, False, True, False]))
    assert out.tolist() == [True, True, True, False]


def test_dedup_across_passages_whitespace_normalized():
    texts = ["Same  sentence.", "Other.", "same sentence.", "Same\nsentence."]
    u = make_units([0.9, 0.9, 0.9, 0.2], passage=[0, 0, 1, 1], texts=texts)
    out, removed = drop_duplicates(u, np.array([True, True, True, True]))
    assert out.tolist() == [True, True, False, False] and removed == 2


def test_budget_never_exceeded_and_best_first():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = 20
        u = make_units(rng.random(n), passage=rng.integers(0, 3, n), tokens=rng.integers(1, 40, n))
        budget = int(rng.integers(0, 200))
        keep = pack_budget(u, np.ones(n, bool), budget)
        assert u.tokens[keep].sum() <= budget
        # greedy with skipping: no unit left out could still fit in what remains
        remaining = budget - u.tokens[keep].sum()
        assert not (u.tokens[~keep] <= remaining).any()
        capped = pack_budget(u, np.ones(n, bool), None, per_passage=30)
        for p in range(3):
            assert u.tokens[capped & (u.passage == p)].sum() <= 30


def test_budget_prefers_higher_scores():
    u = make_units([0.9, 0.2, 0.8], tokens=[10, 10, 10])
    assert pack_budget(u, np.ones(3, bool), 20).tolist() == [True, False, True]


def test_passage_gate():
    u = make_units([0.9, 0.9], passage=[0, 1], relevance=[0.9, 0.1])
    keep, _ = select(u, SelectionParams(threshold=0.5, min_relevance=0.5))
    assert keep.tolist() == [True, False]


def test_merge_spans_restores_document_order():
    starts, ends = np.array([0, 10, 20, 30]), np.array([9, 19, 29, 39])
    spans = merge_spans(starts, ends, np.array([0.6, 0.9, 0.1, 0.7]), np.array([True, True, False, True]))
    assert spans == [(0, 19, 0.9), (30, 39, 0.7)]


@pytest.mark.parametrize(
    "knob", ["token_budget", "per_passage_budget", "neighbors", "keep_top", "threshold", "continuation"]
)
def test_integers_past_float_range_are_a_clear_error(knob):
    from pruner_model.inference.settings import SelectionParams

    with pytest.raises(ValueError, match=f"{knob} must be at most"):
        SelectionParams(**{knob: 10**400})
