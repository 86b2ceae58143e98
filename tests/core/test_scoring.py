"""The scoring path's batch plan: every window scored once, in batches of close lengths that fit
the token bound, and the scores independent of how windows were batched."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from pruner_model.core import scoring
from pruner_model.core.scoring import plan_batches, score_pairs


def plan_cost(lengths, batches, call=scoring.CALL_TOKENS):
    cost = 0.0
    for b in batches:
        width = float(np.max(np.asarray(lengths)[b]))
        cost += call + len(b) * width * (1 + width / scoring.ATTENTION_TOKENS)
    return cost


@pytest.mark.parametrize("seed", range(5))
def test_plan_covers_every_window_once_within_its_bounds(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 512, size=int(rng.integers(1, 90)))
    batches = plan_batches(lengths, batch_size=16, max_tokens=1024)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(lengths)))
    assert [lengths[b].max() for b in batches] == sorted((lengths[b].max() for b in batches), reverse=True)
    for b in batches:
        assert len(b) <= 16
        if len(b) > 1:  # a window longer than the bound goes alone
            assert len(b) * lengths[b].max() <= 1024


@pytest.mark.parametrize("seed", range(6))
def test_plan_is_the_cheapest_split_of_the_sorted_windows(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 300, size=7)
    order = np.argsort(-lengths, kind="stable")
    best = np.inf
    for cuts in itertools.product([False, True], repeat=len(lengths) - 1):  # every split of the sorted run
        bounds = [0, *[i + 1 for i, c in enumerate(cuts) if c], len(lengths)]
        parts = [order[a:b] for a, b in zip(bounds, bounds[1:])]
        if all(len(p) <= 4 and (len(p) == 1 or len(p) * lengths[p].max() <= 600) for p in parts):
            best = min(best, plan_cost(lengths, parts))
    assert plan_cost(lengths, plan_batches(lengths, batch_size=4, max_tokens=600)) == pytest.approx(best)


def test_a_short_window_does_not_ride_in_a_long_batch():
    batches = plan_batches([500, 490, 40, 480, 30], batch_size=8, max_tokens=4096)
    assert [sorted(b.tolist()) for b in batches] == [[0, 1, 3], [2, 4]]


def test_short_windows_share_a_call_and_a_huge_call_cost_asks_for_the_fewest_calls():
    assert [b.tolist() for b in plan_batches([200, 60, 50], batch_size=8)] == [[0], [1, 2]]
    assert [b.tolist() for b in plan_batches([200, 60, 50], batch_size=8, call_tokens=1e9)] == [[0, 1, 2]]
    assert sorted(
        len(b) for b in plan_batches([100] * 10, batch_size=4, max_tokens=1 << 30, call_tokens=1e9)
    ) == [2, 4, 4]


def test_scores_do_not_depend_on_the_batching(tiny_model, bert_tokenizer):
    queries = ["who built it?", "when?", "what river flows through the old town near the harbour?"]
    texts = [
        "It was built by Eiffel. " * 3,
        "In 1889. It opened in May.",
        "The Spree flows through Berlin. " * 9,
    ]
    bounds = []
    for t in texts:
        ends = np.array([i + 1 for i, c in enumerate(t) if c == "."])
        starts = np.concatenate([[0], ends[:-1] + 1])
        bounds.append((starts, ends))
    names = ["input_ids", "attention_mask", "token_type_ids"]

    def forward(batch):
        return tiny_model.eval().predict(batch)

    args = (forward, bert_tokenizer, tiny_model.config, queries, texts, bounds, names)
    one = score_pairs(*args, batch_size=1)
    wide = score_pairs(*args, batch_size=32, max_tokens=1 << 16)
    for a, b in zip(one.pairs, wide.pairs):
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-5)
        assert a.relevance == pytest.approx(b.relevance, abs=1e-5)
