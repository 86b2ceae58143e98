"""Training's view of the pruning metrics; they live in :mod:`pruner_model.metrics` so that
`pruner evaluate` (inference side) computes exactly the numbers the training loop reports."""

from pruner_model.metrics import (  # noqa: F401
    ScoredGroup,
    best_compression_at,
    calibrate_threshold,
    metrics_at,
    roc_auc,
    sweep,
)
