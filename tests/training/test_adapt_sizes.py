"""An adaptation sized for a real labeled set: calibration and the report score a bounded, seeded
sample of their splits, and a long step says how long it will take before it starts."""

from __future__ import annotations

import pytest
from pruner_model.adaptation import estimate
from pruner_model.evaluation.groups import group_of
from pruner_model.training.adapt import AdaptSettings, encoder_calibration_config, sample_of

from pruner_model import ContextPruner
from tests.training.helpers import labeled_documents


def test_a_sample_is_whole_groups_in_file_order(tmp_path):
    _, recs = labeled_documents(tmp_path, n_groups=30)
    groups = {group_of(r) for r in recs}
    sample = sample_of(recs, 7, seed=0)
    assert len({group_of(r) for r in sample}) == 7
    kept = {group_of(r) for r in sample}
    assert sample == [r for r in recs if group_of(r) in kept]  # every record of a kept group, in order
    assert sample_of(recs, 7, seed=1) != sample  # another draw with another seed
    assert sample_of(recs, len(groups) + 5, seed=0) == recs
    assert sample_of(recs, None, seed=0) == recs


def test_the_encoder_recipe_calibrates_on_the_sample_only(tmp_path):
    path, _ = labeled_documents(tmp_path)
    settings = AdaptSettings(labeled=[str(path)], model=None, output=str(tmp_path / "out"), sample_groups=12)
    assert encoder_calibration_config(settings, tmp_path / "out")["data"]["calibration_dev_groups"] == 12
    every = AdaptSettings(labeled=[str(path)], model=None, output=str(tmp_path / "out"), sample_groups=None)
    assert encoder_calibration_config(every, tmp_path / "out")["data"]["calibration_dev_groups"] is None


def test_sample_groups_below_one_is_refused(tmp_path):
    path, _ = labeled_documents(tmp_path)
    with pytest.raises(ValueError, match="--sample-groups"):
        AdaptSettings(labeled=[str(path)], model=None, output=str(tmp_path / "o"), sample_groups=0).check()


def test_an_estimate_is_said_for_a_long_step_only(tiny_checkpoint):
    rate = estimate.scoring_rate(ContextPruner.from_pretrained(tiny_checkpoint, dtype="fp32"))
    assert rate > 0
    assert estimate.text("pairs to score", 10, rate=100.0) is None  # a tenth of a second
    line = estimate.text("pairs to score", 12_000, rate=100.0)  # two minutes
    assert line.startswith("about 12,000 pairs to score, about 2 minutes")
    assert estimate.text("training windows", 3_000, rate=100.0, cost=estimate.TRAIN_COST).startswith(
        "about 3,000 training windows, about 2 minutes"
    )


def test_model_default_is_the_shipped_model(tmp_path):
    import json

    from pruner_model.core.default_model import default_model_path

    from pruner_model.cli import main as cli_main

    path, _ = labeled_documents(tmp_path)
    out = tmp_path / "out"
    argv = ["adapt", "--labeled", str(path), "--model", "default", "--output", str(out), "--until", "split"]
    assert cli_main(argv) == 0
    settings = json.loads((out / "adapt.json").read_text())["settings"]
    assert settings["model"] == str(default_model_path()) and settings["sample_groups"] == 1000


def test_adapting_a_checkpoint_on_fewer_groups_than_measured_to_pay_warns():
    from pruner_model.adaptation.pipeline import SMALL_TRAIN_GROUPS, small_set_warning

    ckpt = {"model": "/models/default", "max_train_groups": None}
    few = {"groups": SMALL_TRAIN_GROUPS - 1, "with_answer": 150}
    line = small_set_warning(ckpt, few)
    assert line and f"{SMALL_TRAIN_GROUPS - 1} training groups" in line and "pruner calibrate" in line
    assert small_set_warning(ckpt, {"groups": SMALL_TRAIN_GROUPS, "with_answer": 150}) is None
    # --max-train-groups below the measured size is a small set too
    capped = {**ckpt, "max_train_groups": 50}
    assert "50 training groups" in small_set_warning(capped, {"groups": 5000, "with_answer": 4000})
    # new heads on the bundled encoder have no recalibration alone to fall back on: no warning
    assert small_set_warning({"model": None, "max_train_groups": None}, few) is None
