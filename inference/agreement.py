"""Does a faster way of running the encoder make the same decisions? The keep/drop decision of
every sentence of fixed (query, passage) pairs under one backend or precision against another:
what the int8 export is checked by, and what lets a torch checkpoint run in bf16 by default where
the CPU or GPU has it natively."""

from __future__ import annotations

import logging

import numpy as np

logger = logging.getLogger(__name__)

MIN_AGREEMENT = 0.98  # share of sentences with the same keep/drop decision as fp32

VALIDATION_QUERIES = [
    "When was the tower built?",
    "Who designed the statue's metal framework?",
    "How many visitors did the museum have?",
    "What is the river's name?",
]
VALIDATION_PASSAGES = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris. It was built from 1887 to 1889 by the "
    "company of Gustave Eiffel. It was the centrepiece of the 1889 World's Fair.",
    "The Statue of Liberty stands on Liberty Island. Its metal framework was built by Gustave Eiffel. "
    "It was dedicated in 1886.",
    "The Louvre had 8.7 million visitors in 2023. It is located on the Right Bank of the Seine.",
    "Berlin lies on the banks of the Spree. The river flows into the Havel. " * 12,
]


def validation_items() -> list[tuple[str, list[str]]]:
    """Every validation query with every validation passage."""
    return [(q, VALIDATION_PASSAGES) for q in VALIDATION_QUERIES]


def keep_decisions(pruner, items) -> np.ndarray:
    """Keep/drop decision of every sentence of ``pruner.prune_batch(items)``, in order (no dedup)."""
    return np.array(
        [s.kept for r in pruner.prune_batch(items, dedup=False) for p in r.passages for s in p.sentences],
        dtype=bool,
    )


def choose_precision(pruner) -> tuple[str, float | None]:
    """For a torch backend on a device with native bf16: bf16 when its keep/drop decisions on the
    validation sentences agree with fp32's on at least ``MIN_AGREEMENT`` of them, else fp32.
    Returns the precision kept and the agreement (None when bf16 is not native: nothing to try)."""
    from pruner_model.core.precision import resolve_precision
    from pruner_model.inference.backends import TorchBackend

    backend = pruner.backend
    if not isinstance(backend, TorchBackend) or resolve_precision("auto", backend.device) != "bf16":
        return backend.precision, None
    items = validation_items()
    backend.set_precision("fp32")
    reference = keep_decisions(pruner, items)
    backend.set_precision("bf16")
    agreement = float(np.mean(keep_decisions(pruner, items) == reference)) if len(reference) else 1.0
    if agreement < MIN_AGREEMENT:
        backend.set_precision("fp32")
    return backend.precision, agreement
