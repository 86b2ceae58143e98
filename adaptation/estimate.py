"""How long a step of an adaptation will take, said before it starts: the (query, passage) pairs
it scores or the windows it trains on, over this machine's speed measured on one probe batch of
the checkpoint (windows of 256 tokens; the user's passages are mostly shorter, so the estimate
errs long). Training a window costs about three times scoring one (forward and backward passes)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

PROBE_WINDOWS = 8
PROBE_TOKENS = 256
TRAIN_COST = 3.0  # a training window against a scored one
SAY_ABOVE_SECONDS = 60.0  # shorter steps are not announced


def scoring_rate(pruner) -> float:
    """Windows of ``PROBE_TOKENS`` tokens a second that ``pruner``'s backend scores here."""
    ids = np.full((PROBE_WINDOWS, PROBE_TOKENS), 1000, dtype=np.int64)
    batch = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    batch = {k: v for k, v in batch.items() if k in pruner.backend.input_names}
    pruner.backend(batch)  # warm-up
    t0 = time.perf_counter()
    pruner.backend(batch)
    return PROBE_WINDOWS / max(time.perf_counter() - t0, 1e-6)


def pairs_in(files: list[Path], groups: int | None = None) -> int:
    """(query, passage) pairs of labeled files (one record each), or ``groups`` groups' worth at
    the files' own passages a group; one pass over the files."""
    from pruner_model.core.records import iter_jsonl
    from pruner_model.evaluation.groups import group_of

    records, ids = 0, set()
    for f in files:
        for r in iter_jsonl(f):
            records += 1
            ids.add(group_of(r))
    if groups is None or groups >= len(ids):
        return records
    return round(records / len(ids) * groups)


def minutes(pairs: int, rate: float, cost: float = 1.0) -> float:
    return pairs * cost / rate / 60.0


def text(what: str, pairs: int, rate: float, cost: float = 1.0) -> str | None:
    """``about N <what>, about M minutes on this machine``; None for a step under a minute."""
    m = minutes(pairs, rate, cost)
    if m * 60 < SAY_ABOVE_SECONDS:
        return None
    return (
        f"about {pairs:,} {what}, about {m:.0f} minutes here (at {rate:.1f} windows of 256 tokens a second)"
    )
