"""The one scoring path: windows → length-sorted padded batches → a backend → token
probabilities → sentence scores and passage relevance.

`ContextPruner`, the training loop's dev evaluation, `pruner evaluate` and the ONNX export's
validation all score through :func:`score_windows`, so what training reports is what inference
computes. A *forward* is any callable that maps ``{input_name: int64 [batch, seq]}`` to
``(token_logits [batch, seq], relevance_logits [batch])`` as numpy arrays: a torch model
(:meth:`pruner_model.PrunerModel.predict`) or an onnxruntime session.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pruner_model.core.alignment import Windows, encode_pairs, sentence_scores

Forward = Callable[[dict[str, np.ndarray]], tuple[np.ndarray, np.ndarray]]


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function, float64, without overflow warnings for large negative logits."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # NaN logits stay NaN (the caller checks), silently
        return np.exp(-np.logaddexp(0.0, -x))


def pad_rows(rows: Sequence[Sequence[int]], fill: int, width: int | None = None) -> np.ndarray:
    """Ragged int rows as one int64 ``[len(rows), width]`` array padded with ``fill`` on the right.

    >>> pad_rows([[1, 2, 3], [4]], fill=0).tolist()
    [[1, 2, 3], [4, 0, 0]]
    """
    width = max((len(r) for r in rows), default=0) if width is None else width
    out = np.full((len(rows), width), fill, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


# Batches are planned from window lengths: padded tokens cost as much as real ones on a CPU, a
# batch of many long windows leaves the cache, and every forward call has a fixed cost (measured
# with benchmarks/bench_inference.py: docs/serving.md), so a batch holds windows of close lengths
# and a bounded number of tokens, and short windows share a call rather than run alone.
CPU_BATCH_TOKENS = 1024  # padded tokens in one forward call on a CPU
GPU_BATCH_TOKENS = 1 << 16  # on a GPU, where wide batches pay
# The planner's cost of a call of n windows padded to L tokens, in tokens: CALL_TOKENS + n * L *
# (1 + L / ATTENTION_TOKENS), fitted by benchmarks/bench_call_cost.py (on a 2-core AVX-512 EPYC a call
# cost what 43-61 tokens do, attention's quadratic term equalled the linear one at 990-1,360 tokens;
# 60 instead of 40 planned no faster there: docs/serving.md).
CALL_TOKENS = 40.0
ATTENTION_TOKENS = 1400.0
# on a GPU a call's fixed cost (kernel launches) outweighs thousands of tokens: few, wide calls
# (an estimate; no GPU run has fitted it)
GPU_CALL_TOKENS = 4096.0


def batch_tokens(on_cpu: bool) -> int:
    """Padded tokens a forward call may hold on that device (a backend's ``batch_tokens``)."""
    return CPU_BATCH_TOKENS if on_cpu else GPU_BATCH_TOKENS


def call_tokens(on_cpu: bool) -> float:
    """A forward call's fixed cost in tokens on that device (a backend's ``call_tokens``)."""
    return CALL_TOKENS if on_cpu else GPU_CALL_TOKENS


def plan_batches(
    lengths: Sequence[int],
    batch_size: int,
    max_tokens: int = CPU_BATCH_TOKENS,
    call_tokens: float | None = None,
) -> list[np.ndarray]:
    """Window indices in forward calls, the cheapest plan under the cost model above: longest
    first, each batch a run of the length-sorted windows padded only to its own longest, at most
    ``batch_size`` windows and ``max_tokens`` padded tokens (a longer window goes alone).
    ``call_tokens``: a call's fixed cost in tokens (None: :data:`CALL_TOKENS`); a huge value asks
    for the fewest calls, as plain batches of ``batch_size`` would.

    >>> [b.tolist() for b in plan_batches([100, 30, 90, 95, 28], batch_size=8, max_tokens=400)]
    [[0, 3, 2], [1, 4]]
    """
    call = CALL_TOKENS if call_tokens is None else call_tokens
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    longest = lengths[order].astype(np.float64)
    n = len(order)
    # cost[i]: the cheapest plan of the i longest windows; start[i]: where its last batch starts
    cost = np.zeros(n + 1)
    start = np.zeros(n + 1, dtype=np.int64)
    per_window = longest * (1.0 + longest / ATTENTION_TOKENS)
    for i in range(1, n + 1):
        first = np.arange(max(0, i - batch_size), i)  # the last batch is order[first:i]
        size = i - first
        fits = (size == 1) | (size * longest[first] <= max_tokens)
        c = np.where(fits, cost[first] + call + size * per_window[first], np.inf)
        k = int(np.argmin(c))
        cost[i], start[i] = c[k], first[k]
    batches, i = [], n
    while i > 0:
        batches.append(order[start[i] : i])
        i = int(start[i])
    return batches[::-1]


def pad_value(name: str, pad_id: int) -> int:
    """What an input is padded with: the tokenizer's pad id for ``input_ids``, else 0."""
    return pad_id if name == "input_ids" else 0


@dataclass
class PairScores:
    """Model output for one (query, passage) pair, gathered from all its windows."""

    scores: np.ndarray  # [n_units] mean token probability of each unit (token head only)
    tokens: np.ndarray  # [n_units] distinct context tokens of each unit
    relevance: float  # passage relevance probability (max over the pair's windows)
    window_tokens: int  # tokens the encoder read for this pair (all windows, query included)


@dataclass
class WindowScores:
    pairs: list[PairScores]
    token_probs: list[np.ndarray]  # per window, unpadded
    encoder_seconds: float


# over 60 lines: the one scoring path, kept whole so every backend runs exactly the same steps
def score_windows(
    forward: Forward,
    windows: Windows,
    bounds: Sequence[tuple[np.ndarray, np.ndarray]],
    input_names: Sequence[str],
    pad_id: int,
    batch_size: int = 32,
    progress_above: int | None = None,
    max_tokens: int | None = None,
) -> WindowScores:
    """Score every window (in the batches of :func:`plan_batches`: longest first, windows of close
    lengths, each batch padded only to its own longest window) and turn token probabilities into
    unit scores of each pair.

    Args:
        forward: the backend (see module docstring).
        windows: :func:`pruner_model.encode_pairs` output.
        bounds: per pair, the ``(starts, ends)`` char offsets of its units (:func:`unit_bounds`).
        input_names: the inputs ``forward`` takes; names the tokenizer did not produce are skipped.
        pad_id: the tokenizer's pad token id.
        batch_size: at most this many windows per forward call.
        progress_above: show a progress bar (stderr) when there are more windows than this.
        max_tokens: padded tokens per forward call; None: the backend's ``batch_tokens``
            (:data:`CPU_BATCH_TOKENS` or :data:`GPU_BATCH_TOKENS`), else the CPU's.

    Returns:
        :class:`WindowScores`, ``pairs[i]`` for ``bounds[i]``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    names = [n for n in input_names if n in windows.features]
    probs: list[np.ndarray] = [np.zeros(0)] * len(windows)
    relevance = np.zeros(len(windows))
    encoder_seconds = 0.0
    bar = None
    if progress_above is not None and len(windows) > progress_above:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(windows), desc="scoring", unit="window")
    if max_tokens is None:
        max_tokens = getattr(forward, "batch_tokens", CPU_BATCH_TOKENS)
    call = getattr(forward, "call_tokens", None)
    for idx in plan_batches(windows.lengths, batch_size, max_tokens, call):
        batch = {n: pad_rows([windows.features[n][w] for w in idx], pad_value(n, pad_id)) for n in names}
        t = time.perf_counter()
        token_logits, relevance_logits = forward(batch)
        encoder_seconds += time.perf_counter() - t
        token_probs = sigmoid(token_logits)
        relevance[idx] = sigmoid(relevance_logits)
        for row, w in enumerate(idx):
            probs[w] = token_probs[row, : windows.lengths[w]]
        if bar is not None:
            bar.update(len(idx))
    if bar is not None:
        bar.close()
    pairs = []
    for i, (starts, ends) in enumerate(bounds):
        ws = windows.windows_of(i)
        s, n = sentence_scores([probs[w] for w in ws], [windows.offsets[w] for w in ws], starts, ends)
        pairs.append(
            PairScores(
                scores=s,
                tokens=n,
                relevance=float(relevance[ws].max()) if len(ws) else 0.0,
                window_tokens=int(windows.lengths[ws].sum()),
            )
        )
    return WindowScores(pairs, probs, encoder_seconds)


def score_pairs(
    forward: Forward,
    tokenizer,
    config,
    queries: Sequence[str],
    texts: Sequence[str],
    bounds: Sequence[tuple[np.ndarray, np.ndarray]],
    input_names: Sequence[str],
    batch_size: int = 32,
    progress_above: int | None = None,
    max_tokens: int | None = None,
) -> WindowScores:
    """:func:`score_windows` over ``(queries[i], texts[i])`` pairs, windowed as ``config``
    (``max_length``, ``stride``, ``max_query_length``) says."""
    windows = encode_pairs(
        tokenizer, queries, texts, config.max_length, config.stride, config.max_query_length
    )
    pad = tokenizer.pad_token_id or 0
    return score_windows(forward, windows, bounds, input_names, pad, batch_size, progress_above, max_tokens)
