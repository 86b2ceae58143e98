"""Training: a YAML config (:mod:`~pruner_model.training.config`), records to windows and batches,
the accelerate loop with resumable state, the relevance teacher, then calibration
(:mod:`~pruner_model.training.calibration`, through :func:`pruner_model.evaluation.calibrate.calibrate`),
the held-out report and the published checkpoint with its model card.

May import :mod:`pruner_model.core` and :mod:`pruner_model.evaluation`.
"""
