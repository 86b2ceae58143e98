"""Evaluation: labeled groups, metrics, exact statistics of a promise, threshold calibration and
shifted slices. Imports the core only; training and inference both use it."""
