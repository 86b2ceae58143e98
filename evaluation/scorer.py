"""The one scorer: labeled groups in, :class:`ScoredGroup` s out, through the one scoring path
(:func:`pruner_model.core.scoring.score_windows`) that inference uses.

In-training evaluation, calibration, ``pruner evaluate``, the shift protocol and int8 calibration
all call :func:`score_groups`, with a :class:`~pruner_model.PrunerModel` (and its tokenizer) or
with a loaded ``ContextPruner`` (any backend: torch, ONNX fp32 or int8). Scores are the token
head's sentence scores as they come; each unit also carries its passage's relevance probability,
so the score rules (relevance weighting, relative floor) are applied by whoever needs them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from pruner_model.core.alignment import Windows, encode_pairs, span_labels
from pruner_model.core.precision import autocast_dtype
from pruner_model.core.scoring import batch_tokens, call_tokens, score_windows
from pruner_model.evaluation.groups import LabeledGroup
from pruner_model.evaluation.metrics import ScoredGroup, roc_auc

TORCH_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class EncodedGroups:
    """Labeled groups tokenized into windows once (one pair per passage, in group order), so an
    evaluation repeated during training does not tokenize again."""

    groups: list[LabeledGroup]
    windows: Windows
    token_labels: list[np.ndarray]  # per window: 1 relevant, 0 not, IGNORE_INDEX off the context
    bounds: list[tuple[np.ndarray, np.ndarray]]  # per pair: unit (starts, ends)
    pair_group: np.ndarray  # [n_pairs] index into ``groups``

    def __len__(self) -> int:
        return len(self.groups)


@dataclass(frozen=True)
class Scored:
    """What :func:`score_groups` returns."""

    groups: list[ScoredGroup]  # one per labeled group, in order
    token_auc: float  # of the token head over every context token
    seconds: float  # wall time of scoring (tokenization, encoder, token -> unit scores)


def encode_groups(groups: list[LabeledGroup], tokenizer, config) -> EncodedGroups:
    """Tokenize every (query, passage) pair of ``groups`` into windows as ``config``
    (``max_length``, ``stride``, ``max_query_length``) says, with token labels."""
    queries, texts, spans, bounds, pair_group = [], [], [], [], []
    for gi, g in enumerate(groups):
        for p, b in zip(g.passages, g.bounds):
            queries.append(g.query)
            texts.append(p["text"])
            spans.append(p["relevant_spans"])
            bounds.append(b)
            pair_group.append(gi)
    w = encode_pairs(tokenizer, queries, texts, config.max_length, config.stride, config.max_query_length)
    token_labels = [span_labels(off, spans[p]) for off, p in zip(w.offsets, w.pair_index)]
    return EncodedGroups(groups, w, token_labels, bounds, np.asarray(pair_group, dtype=np.int64))


def score_groups(
    scorer,
    groups: list[LabeledGroup] | EncodedGroups,
    tokenizer=None,
    precision: str = "fp32",
    batch_size: int | None = None,
    progress: bool = False,
) -> Scored:
    """Sentence scores of every group, and the token AUC.

    Args:
        scorer: a ``PrunerModel`` (then ``tokenizer`` is needed, and it runs in ``precision``:
            ``"fp32"`` or a resolved ``"bf16"``/``"fp16"``, see :mod:`pruner_model.core.precision`)
            or a ``ContextPruner`` (its backend, tokenizer, batch size and precision).
        groups: labeled groups, or the same already tokenized (:func:`encode_groups`).
        batch_size: windows per encoder call (default: the pruner's, or 32 for a model).
        progress: show a progress bar over the windows (stderr).
    """
    t0 = time.perf_counter()
    forward, tokenizer, config, names, batch_size = _forward(scorer, tokenizer, precision, batch_size)
    enc = groups if isinstance(groups, EncodedGroups) else encode_groups(groups, tokenizer, config)
    model = None if hasattr(scorer, "backend") else scorer
    was_training = bool(model is not None and model.training)
    if model is not None:
        model.eval()
    try:
        out = score_windows(
            forward,
            enc.windows,
            enc.bounds,
            names,
            tokenizer.pad_token_id or 0,
            batch_size,
            progress_above=0 if progress else None,
        )
    finally:
        if was_training:
            model.train()
    lab = np.concatenate(enc.token_labels) if enc.token_labels else np.zeros(0)
    probs = np.concatenate(out.token_probs) if out.token_probs else np.zeros(0)
    ctx = lab >= 0
    auc = roc_auc(probs[ctx], lab[ctx] == 1)
    cuts = np.searchsorted(enc.pair_group, np.arange(len(enc.groups) + 1))  # pairs are in group order
    scored = []
    for gi, g in enumerate(enc.groups):
        pairs = out.pairs[cuts[gi] : cuts[gi + 1]]
        relevance = [np.full(len(p.scores), p.relevance) for p in pairs]
        scored.append(scored_group(g, [p.scores for p in pairs], [p.tokens for p in pairs], relevance))
    return Scored(scored, auc, time.perf_counter() - t0)


def scored_group(
    g: LabeledGroup,
    scores: list[np.ndarray],
    tokens: list[np.ndarray] | np.ndarray,
    relevance: list[np.ndarray] | None = None,
) -> ScoredGroup:
    """One group's unit scores (per passage) with its labels and words: the one place a
    :class:`ScoredGroup` is built (baselines too, with the model's token counts)."""
    return ScoredGroup(
        scores=_cat(scores, np.float64),
        labels=_cat(g.labels, bool),
        tokens=tokens if isinstance(tokens, np.ndarray) else _cat(tokens, np.int64),
        words=_cat(g.words, np.int64),
        relevance=None if relevance is None else _cat(relevance, np.float64),
    )


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def _forward(scorer, tokenizer, precision: str, batch_size: int | None):
    """``(forward, tokenizer, config, input names, batch size)`` for a model or a pruner."""
    backend = getattr(scorer, "backend", None)
    if backend is not None:  # a ContextPruner: its backend already runs in its own precision
        return backend, scorer.tokenizer, scorer.config, backend.input_names, batch_size or scorer.batch_size
    if tokenizer is None:
        raise ValueError("scoring a PrunerModel needs its tokenizer")
    dtype = autocast_dtype(precision)  # type: ignore[arg-type]

    def forward(batch):
        return scorer.predict(batch, dtype=dtype)

    on_cpu = next(scorer.parameters()).device.type == "cpu"
    forward.batch_tokens = batch_tokens(on_cpu)  # type: ignore[attr-defined]
    forward.call_tokens = call_tokens(on_cpu)  # type: ignore[attr-defined]
    return (
        forward,
        tokenizer,
        scorer.config,
        TORCH_INPUTS,
        batch_size or 32,
    )
