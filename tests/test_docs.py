"""Docs that match the code: every training config key is documented."""

import dataclasses
from pathlib import Path

from pruner_model.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def test_every_config_key_is_in_the_config_reference():
    doc = (ROOT / "docs" / "training-config.md").read_text(encoding="utf-8")
    cfg = TrainConfig()
    for section in dataclasses.fields(cfg):
        assert f"## {section.name}" in doc, section.name
        for f in dataclasses.fields(getattr(cfg, section.name)):
            assert f"| `{f.name}` |" in doc, f"{section.name}.{f.name}"


def test_readme_stays_a_front_page():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200
