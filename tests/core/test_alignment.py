import numpy as np
import pytest

from pruner_model import IGNORE_INDEX, encode_pairs, segment, sentence_scores, span_labels

CONTEXT = "Paris is the capital of France. The Eiffel Tower was built in 1889. It is made of iron."


@pytest.mark.parametrize("tok_name", ["bert_tokenizer", "no_tti_tokenizer"])
def test_labels_land_exactly_on_span_tokens(request, tok_name):
    tok = request.getfixturevalue(tok_name)
    start = CONTEXT.index("The Eiffel")
    end = CONTEXT.index("1889.") + len("1889.")
    w = encode_pairs(tok, ["When was the tower built?"], [CONTEXT], max_length=128, stride=16)
    assert len(w) == 1
    assert ("token_type_ids" in w.features) == (tok_name == "bert_tokenizer")
    labels = span_labels(w.offsets[0], [[start, end]])
    ids = w.features["input_ids"][0]
    pos = [i for i, lab in enumerate(labels) if lab == 1]
    assert tok.decode([ids[i] for i in pos]) == "the eiffel tower was built in 1889."
    # query and special tokens are ignored, the other context tokens are negatives
    ctx = w.offsets[0][:, 0] >= 0
    assert (labels[~ctx] == IGNORE_INDEX).all()
    assert set(labels[ctx]) == {0, 1}
    assert tok.decode([ids[i] for i in np.flatnonzero(ctx)]) == CONTEXT.lower()


def test_negative_record_has_no_positive_token(bert_tokenizer):
    w = encode_pairs(bert_tokenizer, ["q"], [CONTEXT], max_length=128, stride=16)
    labels = span_labels(w.offsets[0], [])
    assert (labels[w.offsets[0][:, 0] >= 0] == 0).all()


def test_long_context_windows_cover_every_sentence(bert_tokenizer):
    context = " ".join(f"Sentence number {i} talks about topic {i * 7}." for i in range(120))
    units = segment(context)
    w = encode_pairs(
        bert_tokenizer, ["which topic?"] * 1, [context], max_length=64, stride=8, max_query_length=8
    )
    assert len(w) > 5 and all(n <= 64 for n in w.lengths)
    probs = [np.full(len(o), 0.25) for o in w.offsets]
    scores, n_tokens = sentence_scores(
        probs, w.offsets, np.array([u.start for u in units]), np.array([u.end for u in units])
    )
    assert len(scores) == len(units) == 120
    assert (n_tokens > 0).all()  # every sentence was seen by some window
    assert np.allclose(scores, 0.25)
    # distinct tokens: windows overlap but each token counts once
    total = len(bert_tokenizer(context, add_special_tokens=False)["input_ids"])
    assert n_tokens.sum() == total


def test_sentence_score_is_mean_of_its_token_probs(bert_tokenizer):
    units = segment(CONTEXT)
    w = encode_pairs(bert_tokenizer, ["q"], [CONTEXT], max_length=128, stride=16)
    off = w.offsets[0]
    second = (off[:, 0] >= units[1].start) & (off[:, 0] < units[1].end)
    probs = np.where(second, 0.9, 0.1)
    scores, _ = sentence_scores(
        [probs], [off], np.array([u.start for u in units]), np.array([u.end for u in units])
    )
    assert np.allclose(scores, [0.1, 0.9, 0.1])


def test_long_query_is_truncated_so_context_fits(bert_tokenizer):
    query = "word " * 500
    w = encode_pairs(bert_tokenizer, [query], [CONTEXT], max_length=64, stride=8, max_query_length=16)
    assert all(n <= 64 for n in w.lengths)
    assert sum((o[:, 0] >= 0).sum() for o in w.offsets) > 0


def test_windows_and_token_counts_are_right_when_threads_share_the_tokenizer(bert_tokenizer):
    """A fast tokenizer's truncation setting is state of the object: token counts (untruncated)
    and windows (truncated to max_length) from two threads must each get their own."""
    import threading

    from pruner_model.core.alignment import count_tokens, encode_pairs

    long_text = " ".join(f"word{i} stands here." for i in range(600))
    texts = [long_text, "A short one.", long_text[: len(long_text) // 2]]
    expected_count = count_tokens(bert_tokenizer, texts)
    expected = encode_pairs(bert_tokenizer, ["who is it?"] * 3, texts, 64, 16, 8)
    wrong: list[str] = []

    def counter():
        for _ in range(60):
            n = count_tokens(bert_tokenizer, texts)
            if n != expected_count:
                wrong.append(f"count {n} != {expected_count}")

    def encoder():
        for _ in range(60):
            w = encode_pairs(bert_tokenizer, ["who is it?"] * 3, texts, 64, 16, 8)
            if w.features["input_ids"] != expected.features["input_ids"]:
                wrong.append(f"windows of lengths {sorted(set(w.lengths.tolist()))}")

    threads = [threading.Thread(target=f) for f in (counter, encoder, counter, encoder)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, wrong[:3]
