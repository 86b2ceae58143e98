"""Dev evaluation during and after training, through the one scoring path
(:func:`pruner_model.scoring.score_windows`) that inference uses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pruner_model import Windows, encode_pairs, span_labels
from pruner_model.groups import LabeledGroup
from pruner_model.scoring import score_windows

from .metrics import (
    ScoredGroup,
    calibrate_threshold,
    metrics_at,
    relative_groups,
    roc_auc,
    weighted_groups,
)


@dataclass
class DevSet:
    """Labeled dev groups tokenized into windows once (one pair per passage, in group order)."""

    groups: list[LabeledGroup]
    windows: Windows
    token_labels: list[np.ndarray]  # per window: 1 relevant, 0 not, IGNORE_INDEX off the context
    bounds: list[tuple[np.ndarray, np.ndarray]]  # per pair: unit (starts, ends)
    pair_group: np.ndarray  # [n_pairs] index into ``groups``

    def __len__(self) -> int:
        return len(self.groups)


def build_dev_set(
    groups: list[LabeledGroup], tokenizer, max_length: int, stride: int, max_query_length: int
) -> DevSet:
    queries, texts, spans, bounds, pair_group = [], [], [], [], []
    for gi, g in enumerate(groups):
        for p, b in zip(g.passages, g.bounds):
            queries.append(g.query)
            texts.append(p["text"])
            spans.append(p["relevant_spans"])
            bounds.append(b)
            pair_group.append(gi)
    w = encode_pairs(tokenizer, queries, texts, max_length, stride, max_query_length)
    token_labels = [span_labels(off, spans[p]) for off, p in zip(w.offsets, w.pair_index)]
    return DevSet(groups, w, token_labels, bounds, np.asarray(pair_group, dtype=np.int64))


def score_dev(
    model, dev: DevSet, batch_size: int = 32, pad_id: int = 0, bf16: bool = False
) -> tuple[list[ScoredGroup], float]:
    """Sentence scores of every dev group (token head only; each unit also carries its passage's
    relevance probability, for relevance-weighted calibration) and the token AUC.

    ``bf16`` runs the encoder under bf16 autocast (in-training evaluation; calibration and
    reported numbers with ``calibration.bf16``, else fp32, the precision of default inference)."""
    was_training = model.training
    model.eval()
    try:
        out = score_windows(
            lambda batch: model.predict(batch, dtype="bf16" if bf16 else None),
            dev.windows,
            dev.bounds,
            ("input_ids", "attention_mask", "token_type_ids"),
            pad_id,
            batch_size,
        )
    finally:
        if was_training:
            model.train()
    lab = np.concatenate(dev.token_labels)
    allp = np.concatenate(out.token_probs)
    ctx = lab >= 0
    auc = roc_auc(allp[ctx], lab[ctx] == 1)
    scored = []
    cuts = np.searchsorted(dev.pair_group, np.arange(len(dev.groups) + 1))  # pairs are in group order
    for gi, g in enumerate(dev.groups):
        pairs = out.pairs[cuts[gi] : cuts[gi + 1]]
        scored.append(
            ScoredGroup(
                scores=np.concatenate([p.scores for p in pairs]),
                labels=np.concatenate(g.labels),
                tokens=np.concatenate([p.tokens for p in pairs]),
                words=np.concatenate(g.words),
                relevance=np.concatenate([np.full(len(p.scores), p.relevance) for p in pairs]),
            )
        )
    return scored, auc


def dev_metrics(
    groups: list[ScoredGroup],
    auc: float,
    threshold: float,
    target: float,
    relative_floor: float | None = None,
    relevance_exponent: float = 0.0,
) -> dict:
    """Metrics at ``threshold`` (on relevance-weighted scores when ``relevance_exponent`` > 0, then
    relative ones when ``relative_floor`` is set), plus the best compression reachable at the
    evidence ``target`` on these groups (an in-sample figure)."""
    groups = relative_groups(weighted_groups(groups, relevance_exponent), relative_floor)
    m = metrics_at(groups, threshold)
    m["relative_floor"] = relative_floor
    m["relevance_exponent"] = relevance_exponent
    t = calibrate_threshold(groups, target)
    at_target = metrics_at(groups, t)
    m.update(
        token_auc=auc,
        calibrated_threshold=t,
        compression_at_target=at_target["compression"],
        evidence_at_target=at_target["evidence_preserved"],
    )
    return m
