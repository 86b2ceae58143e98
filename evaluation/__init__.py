"""Evaluation: labeled groups, metrics, exact statistics of a promise, shifted slices, the
evaluator behind ``pruner evaluate`` and calibration's one home
(:mod:`~pruner_model.evaluation.calibrate`: slices in, a frozen ``Calibration`` out, the one
writer of calibrated values into a config; the threshold searches it runs in
:mod:`~pruner_model.evaluation.calibration` and :mod:`~pruner_model.evaluation.threshold_fit`).

May import :mod:`pruner_model.core` only; training, export and the commands use it.
"""
