"""The model card's operating-point paragraph: it announces a table of dev measurements only when
the run measured one."""

from __future__ import annotations

from types import SimpleNamespace

from pruner_model.training.model_card import _operating_point


def _config():
    return SimpleNamespace(
        threshold=0.05, threshold_model=None, relevance_exponent=0.0, relevance_contrast=0.0
    )


def test_the_paragraph_announces_dev_measurements_only_when_there_are_some():
    measured = _operating_point(_config(), 0.95, 0.01, "", calibrated=True, measured=True)
    assert measured.endswith("measured on dev groups that were not used to calibrate it:")
    bare = _operating_point(_config(), 0.95, 0.01, "", calibrated=True, measured=False)
    assert bare.endswith(".") and "measured on dev groups" not in bare.lower()
    assert bare.startswith("Calibrated threshold **0.0500**")
    uncalibrated = _operating_point(_config(), 0.95, 0.01, "", calibrated=False, measured=False)
    assert "not calibrated" in uncalibrated and uncalibrated.endswith("relying on it.")
