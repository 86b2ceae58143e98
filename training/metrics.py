"""Training's view of the pruning metrics; they live in :mod:`pruner_model.metrics` so that
`pruner evaluate` (inference side) computes exactly the numbers the training loop reports."""

from pruner_model.metrics import (  # noqa: F401
    ScoredGroup,
    best_compression_at,
    calibrate_operating_point,
    calibrate_threshold,
    cross_validate,
    metrics_at,
    relative_groups,
    relative_scores,
    roc_auc,
    sweep,
    weighted_groups,
)
