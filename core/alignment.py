"""Character spans <-> tokens of a tokenized ``(query, context)`` pair.

Training and inference tokenize through :func:`encode_pairs`, so long contexts are cut into the
same windows in both: each window holds the (possibly shortened) query and a slice of the context,
consecutive windows overlap by ``stride`` tokens, and nothing is dropped. Every context token
carries its character offsets into the context; query, special and padding tokens carry
``(-1, -1)``. All mappings are vectorized with numpy.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

IGNORE_INDEX = -100  # label of tokens the loss must not see (query, special, padding)

_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def tokenizer_lock(tokenizer) -> threading.Lock:
    """The one lock of ``tokenizer``: a fast tokenizer keeps its truncation and padding settings
    as state of the object, set by each call, so two threads that call it with different settings
    (windows truncated to ``max_length``, token counts untruncated) can each get the other's.
    Every call in this package holds this lock for the call's duration."""
    with _LOCKS_GUARD:
        try:
            lock = _LOCKS.get(tokenizer)
            if lock is None:
                lock = _LOCKS[tokenizer] = threading.Lock()
        except TypeError:  # not weak-referenceable: one lock shared by all such objects
            lock = _SHARED_LOCK
        return lock


_SHARED_LOCK = threading.Lock()


@dataclass
class Windows:
    """Tokenized windows of many ``(query, context)`` pairs, unpadded."""

    features: dict[str, list[list[int]]]  # model inputs per window (input_ids, attention_mask, ...)
    offsets: list[np.ndarray]  # per window [seq, 2] char offsets into the context; -1 off context
    pair_index: np.ndarray  # [n_windows] index of the pair each window came from
    lengths: np.ndarray = field(init=False)  # [n_windows] tokens in each window

    def __post_init__(self) -> None:
        self.lengths = np.array([len(ids) for ids in self.features["input_ids"]], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.pair_index)

    def windows_of(self, pair: int) -> np.ndarray:
        return np.flatnonzero(self.pair_index == pair)


def truncate_query(tokenizer, query: str, max_tokens: int) -> str:
    """Cut ``query`` after ``max_tokens`` tokens (on a character boundary of the tokenizer)."""
    with tokenizer_lock(tokenizer):
        enc = tokenizer(query, add_special_tokens=False, return_offsets_mapping=True)
    if len(enc["input_ids"]) <= max_tokens:
        return query
    return query[: enc["offset_mapping"][max_tokens - 1][1]]


def encode_pairs(
    tokenizer,
    queries: Sequence[str],
    contexts: Sequence[str],
    max_length: int,
    stride: int = 64,
    max_query_length: int = 64,
) -> Windows:
    """Tokenize pairs into overlapping windows of at most ``max_length`` tokens.

    The query is shortened to ``max_query_length`` tokens first so that every window has room for
    context; ``stride`` is the number of context tokens shared by consecutive windows.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("a fast tokenizer (with offset mapping) is required")
    if len(queries) != len(contexts):
        raise ValueError("queries and contexts differ in length")
    if not queries:
        return Windows({"input_ids": [], "attention_mask": []}, [], np.zeros(0, dtype=np.int64))
    budget = max_length - max_query_length - 4  # room for special tokens
    if budget <= stride:
        raise ValueError(
            f"max_length={max_length} leaves {budget} context tokens per window, not more than "
            f"stride={stride}: raise max_length or lower stride/max_query_length"
        )
    cut = {
        q: truncate_query(tokenizer, q, max_query_length) for q in set(queries)
    }  # one query, many passages
    queries = [cut[q] for q in queries]
    with tokenizer_lock(tokenizer):
        enc = tokenizer(
            list(queries),
            list(contexts),
            truncation="only_second",
            max_length=max_length,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=False,
        )
    names = [n for n in tokenizer.model_input_names if n in enc]
    features = {n: enc[n] for n in names}
    offsets = []
    for i, off in enumerate(enc["offset_mapping"]):
        seq_ids = np.array([-1 if s is None else s for s in enc.sequence_ids(i)])
        arr = np.asarray(off, dtype=np.int64).reshape(-1, 2)
        arr[seq_ids != 1] = -1
        offsets.append(arr)
    pair_index = np.asarray(enc["overflow_to_sample_mapping"], dtype=np.int64)
    return Windows(features, offsets, pair_index)


def span_labels(offsets: np.ndarray, spans: Sequence[Sequence[int]]) -> np.ndarray:
    """Token labels for one window: 1 on context tokens overlapping a relevant char span,
    0 on other context tokens, ``IGNORE_INDEX`` elsewhere."""
    starts, ends = offsets[:, 0], offsets[:, 1]
    on_context = starts >= 0
    labels = np.where(on_context, 0, IGNORE_INDEX).astype(np.int64)
    if len(spans):
        sp = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        hit = (starts[:, None] < sp[None, :, 1]) & (ends[:, None] > sp[None, :, 0])
        labels[on_context & hit.any(axis=1)] = 1
    return labels


def token_to_sentence(token_starts: np.ndarray, sent_starts: np.ndarray, sent_ends: np.ndarray):
    """Index of the sentence each token starts in, or -1 (whitespace between units)."""
    if len(sent_starts) == 0:
        return np.full(len(token_starts), -1, dtype=np.int64)
    idx = np.searchsorted(sent_starts, token_starts, side="right") - 1
    clipped = np.clip(idx, 0, None)
    inside = (idx >= 0) & (token_starts < sent_ends[clipped]) & (token_starts >= 0)
    return np.where(inside, idx, -1)


def sentence_scores(
    token_probs: Sequence[np.ndarray],
    offsets: Sequence[np.ndarray],
    sent_starts: np.ndarray,
    sent_ends: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean token probability of each sentence over every window that sees it.

    ``token_probs[w]`` and ``offsets[w]`` belong to window ``w`` of one context (unpadded or
    padded: padding carries offset -1). Returns ``(scores [n_sent], n_tokens [n_sent])`` where
    ``n_tokens`` counts distinct context tokens (a token seen by two windows counts once).
    """
    n = len(sent_starts)
    if n == 0 or not len(offsets):
        return np.zeros(n), np.zeros(n, dtype=np.int64)
    starts = np.concatenate([o[:, 0] for o in offsets])
    probs = np.concatenate([np.asarray(p, dtype=np.float64)[: len(o)] for p, o in zip(token_probs, offsets)])
    sent = token_to_sentence(starts, sent_starts, sent_ends)
    valid = sent >= 0
    sums = np.bincount(sent[valid], weights=probs[valid], minlength=n)
    counts = np.bincount(sent[valid], minlength=n)
    scores = np.divide(sums, counts, out=np.zeros(n), where=counts > 0)
    ends = np.concatenate([o[:, 1] for o in offsets])
    uniq_starts, first = np.unique(starts[valid], return_index=True)
    weight = token_weights(uniq_starts, ends[valid][first])
    n_tokens = np.bincount(
        token_to_sentence(uniq_starts, sent_starts, sent_ends), weights=weight, minlength=n
    ).astype(np.int64)
    return scores, n_tokens


# A token whose text is longer than any vocabulary piece is a word the tokenizer gave up on (one
# [UNK] for a base64 blob of a million characters): it counts as the tokens a generator's
# tokenizer would make of it, about one per CHARS_PER_TOKEN characters, so token budgets, token
# stats and compute caps cannot be fooled by one long word.
LONG_TOKEN_CHARS = 24
CHARS_PER_TOKEN = 4


def token_weights(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many tokens each (start, end) character span counts for: 1, or for a span longer than
    ``LONG_TOKEN_CHARS``, ``ceil(length / CHARS_PER_TOKEN)``."""
    length = np.asarray(ends, dtype=np.int64) - np.asarray(starts, dtype=np.int64)
    return np.where(length > LONG_TOKEN_CHARS, -(-length // CHARS_PER_TOKEN), 1).astype(np.int64)


# no real text spends more characters than this on one token (English about 4-5, CJK 1-2, code
# under 10): a unit is counted as at least ceil(characters / this) tokens, so characters a
# tokenizer drops (zero-width spaces, combining marks, controls) still count against a budget
MAX_CHARS_PER_TOKEN = 16


def char_token_floor(texts: Sequence[str]) -> np.ndarray:
    """``ceil(len(text) / MAX_CHARS_PER_TOKEN)`` of each text: the fewest tokens it counts for."""
    return np.fromiter((-(-len(t) // MAX_CHARS_PER_TOKEN) for t in texts), dtype=np.int64, count=len(texts))


def count_tokens(tokenizer, texts: Sequence[str]) -> int:
    """Tokens of ``texts`` with long-word weighting (:func:`token_weights`), no special tokens."""
    if not texts:
        return 0
    with tokenizer_lock(tokenizer):
        enc = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    total = 0
    for off in enc["offset_mapping"]:
        if len(off):
            arr = np.asarray(off, dtype=np.int64).reshape(-1, 2)
            total += int(token_weights(arr[:, 0], arr[:, 1]).sum())
    return total


def unit_bounds(units) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` char offsets of units (anything with ``start``/``end``), as int64 arrays."""
    starts = np.array([u.start for u in units], dtype=np.int64)
    ends = np.array([u.end for u in units], dtype=np.int64)
    return starts, ends


def unit_labels(units, spans) -> np.ndarray:
    """For each unit (anything with ``start``/``end``), does it overlap one of the char ``spans``."""
    starts, ends = unit_bounds(units)
    labels = np.zeros(len(units), dtype=bool)
    for s, e in spans:
        labels |= (starts < e) & (ends > s)
    return labels
