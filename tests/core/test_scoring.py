"""The scoring path's batch plan: every window scored once, in batches of close lengths that fit
the token bound, and the scores independent of how windows were batched."""

from __future__ import annotations

import numpy as np
import pytest
from pruner_model.core.scoring import plan_batches, score_pairs


@pytest.mark.parametrize("seed", range(5))
def test_plan_covers_every_window_once_within_its_bounds(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 512, size=int(rng.integers(1, 90)))
    batches = plan_batches(lengths, batch_size=16, max_tokens=1024, min_fill=0.8)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(lengths)))
    assert [lengths[b].max() for b in batches] == sorted((lengths[b].max() for b in batches), reverse=True)
    for b in batches:
        padded = len(b) * lengths[b].max()
        assert len(b) <= 16
        if len(b) > 1:  # a window longer than the bound goes alone
            assert padded <= 1024
            assert lengths[b].sum() >= 0.8 * padded


def test_a_short_window_does_not_ride_in_a_long_batch():
    batches = plan_batches([500, 490, 40, 480, 30], batch_size=8, max_tokens=4096, min_fill=0.8)
    assert [sorted(b.tolist()) for b in batches] == [[0, 1, 3], [2, 4]]


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
