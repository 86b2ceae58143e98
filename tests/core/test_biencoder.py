"""The bundled bi-encoder: the ``biencoder`` baseline and the relevance distillation teacher."""

import numpy as np
import pytest
from pruner_model.core.biencoder import BiEncoder, passage_cosines


@pytest.fixture(scope="module")
def encoder():
    return BiEncoder(batch_size=3)


def test_embeddings_keep_input_order_whatever_the_length_batching(encoder):
    texts = [
        "A short one.",
        "A much longer sentence about the rivers and the mountains of Europe.",
        "Hi",
        "x " * 50,
    ]
    batched = encoder.embed(texts)
    one_by_one = np.concatenate([encoder.embed([t]) for t in texts])
    assert batched.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(batched, one_by_one, atol=1e-4)
    assert encoder.embed([]).shape == (0, 384)


def test_a_passage_scores_its_best_sentence(encoder):
    query = "When was the Eiffel Tower built?"
    answer = "Lyon has two rivers. The Eiffel Tower was built in 1889 for the World's Fair."
    unrelated = "Photosynthesis turns light into chemical energy. Plants store it as sugar."
    scores = passage_cosines(encoder, [query, query, query], [answer, unrelated, ""])
    assert scores[0] > scores[1] + 0.2
    assert scores[2] == -1.0  # no sentence
    alone = encoder.sentence_cosines([query], [["The Eiffel Tower was built in 1889 for the World's Fair."]])[
        0
    ]
    assert scores[0] == pytest.approx(float(alone[0]), abs=1e-4)  # the best sentence, not the passage mean


def test_prefixes_go_on_queries_and_texts_and_change_the_cosines():
    plain = BiEncoder(batch_size=3)
    prefixed = BiEncoder(batch_size=3, query_prefix="query: ", passage_prefix="passage: ")
    query, text = "Who wrote Hamlet?", "Who wrote Hamlet?"
    assert plain.sentence_cosines([query], [[text]])[0][0] == pytest.approx(1.0, abs=1e-5)
    got = prefixed.sentence_cosines([query], [[text]])[0][0]
    q, t = prefixed.embed(["query: " + query, "passage: " + text])
    assert got == pytest.approx(float(q @ t), abs=1e-5)
    assert got < 0.999  # the two prefixes make the same words two different texts
