"""The model card's operating-point paragraph: it announces a table of dev measurements only when
the run measured one."""

from __future__ import annotations

from pathlib import Path
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


def test_the_card_names_every_language_a_shipped_config_trains_on():
    from pruner_model.core.records import LANGUAGE_NAME, SOURCE_LANGUAGE
    from pruner_model.training.config import load_config
    from pruner_model.training.model_card import _languages

    assert set(SOURCE_LANGUAGE.values()) <= set(LANGUAGE_NAME)
    cfg = load_config(Path(__file__).parents[2] / "configs" / "multilingual.yaml")
    said = _languages(cfg)
    for name in ("English", "Arabic", "Bengali", "Chinese", "Korean", "Swahili", "Telugu"):
        assert name in said
    assert _languages(SimpleNamespace(data=SimpleNamespace(mix={"squad": 1.0}))) == "in English"
    unknown = _languages(SimpleNamespace(data=SimpleNamespace(mix={"squad": 1.0, "x": 1.0})))
    assert unknown == "in English"  # a source of no known language is English text
