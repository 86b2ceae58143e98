"""`pruner adapt` without a checkpoint: new heads on the bundled encoder, trained on the user's
train split with the default model's recipe, calibrated on the user's calibration split (and its
shifted copies), nothing replayed or blended; the report measures the trained model alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pruner_model.training.adapt import (
    ENCODER_RECIPE,
    AdaptSettings,
    general_calibration_config,
    training_config,
)

from pruner_model.cli import main as cli_main
from tests.training.helpers import labeled_documents, write_labels_step

ROOT = Path(__file__).resolve().parents[2]


def test_the_encoder_recipe_is_the_default_models():
    recipe = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
    for section in ("model", "train", "calibration"):
        assert ENCODER_RECIPE[section] == recipe[section], section


def test_without_a_checkpoint_the_config_trains_new_heads_on_your_split_alone(tmp_path):
    out = tmp_path / "o"
    settings = AdaptSettings(labeled=[], model=None, output=str(out), max_train_groups=50)
    cfg = training_config(settings, out, train_groups=120)
    assert "init_from" not in cfg["model"] and cfg["model"]["max_length"] == 256
    assert cfg["data"]["train"] == [str(out / "data" / "train.jsonl")]  # nothing to replay
    assert cfg["data"]["mix"] == {"user": 1.0} and cfg["data"]["max_train_groups"] == 50
    assert cfg["train"]["lr"] == ENCODER_RECIPE["train"]["lr"] and cfg["train"]["epochs"] == 2
    recipe = general_calibration_config(settings, out)
    assert recipe["data"]["dev"] == [str(out / "data" / "calibration.jsonl")]
    assert recipe["data"]["calibration_dev_groups"] == settings.sample_groups == 1000  # a bounded sample
    assert recipe["data"]["calibration_sources"] == [] and recipe["data"]["report_dev_groups"] == 0
    assert (
        recipe["calibration"]["enabled"]
        and recipe["calibration"]["shifts"] == ENCODER_RECIPE["calibration"]["shifts"]
    )
    target = AdaptSettings(labeled=[], model=None, output=str(out), target=0.9)
    assert general_calibration_config(target, out)["calibration"]["target_evidence"] == 0.9


def test_adapt_without_a_checkpoint_trains_calibrates_and_reports_the_model(tmp_path, capsys):
    path, _ = labeled_documents(tmp_path)
    out = tmp_path / "mine"
    argv = [
        "adapt", "--labeled", str(path), "--output", str(out), "--epochs", "1", "--dtype", "fp32",
        "--general-dev", str(path), "--general-groups", "8",
        "--set", "train.max_steps=2", "--set", "train.batch_size=4", "--set", "train.mixed_precision=no",
        "--set", "model.relevance_distill_weight=0", "--set", "calibration.bf16=no",
        "--set", "calibration.shift_groups=6",
    ]  # fmt: skip
    assert cli_main(argv) == 0
    err = capsys.readouterr().err
    assert "training new heads on the bundled encoder" in err
    state = json.loads((out / "adapt.json").read_text())
    assert state["settings"]["model"] is None
    assert state["mix"]["share"] == 1.0 and "no checkpoint to blend with" in state["mix"]["reason"]
    cal = state["calibrate"]
    assert cal["on"] == "recipe"
    assert {"as_is", "noisy", "mined"} <= set(cal["slice_thresholds"])  # your split and its shifted copies
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["threshold"] == pytest.approx(cal["threshold"])
    assert not (out / "model.trained").exists()  # nothing was blended
    rows = state["report"]["rows"]
    assert list(rows) == [
        "trained on your train split, calibrated on your calibration split and its shifted copies"
    ]
    assert all(0 <= m["compression"] <= 1 for m in rows.values())
    report = (out / "report.md").read_text()
    assert report.startswith("# Adaptation report: the bundled encoder on ")
    assert "checkpoint" not in report.split("| model |")[1]  # no checkpoint rows or numbers below
    kept, compression = state["report"]["general"]["defaults"]["adapted"]
    assert f"trained model kept {kept:.3f} / compression {compression:.3f}" in report
    assert "what the scores allow): trained model " in report
    weights = (out / "model" / "model.safetensors").stat().st_mtime_ns
    assert cli_main(argv) == 0  # everything done: nothing is trained again
    assert (out / "model" / "model.safetensors").stat().st_mtime_ns == weights


def test_documents_alone_go_through_the_corpus_steps_to_a_model_trained_from_the_encoder(tmp_path):
    corpus = ROOT / "tests" / "fixtures" / "corpus"
    log = tmp_path / "queries.jsonl"
    log.write_text("".join(json.dumps({"query": q}) + "\n" for q in ["how long does sourdough ferment"]))
    out = tmp_path / "mine"
    argv = [
        "adapt", "--corpus", str(corpus), "--queries", str(log), "--output", str(out), "--chunk-words", "40",
        "--passages", "3", "--epochs", "1", "--dtype", "fp32", "--set", "train.max_steps=2",
        "--set", "train.batch_size=4", "--set", "train.mixed_precision=no",
        "--set", "model.relevance_distill_weight=0", "--set", "calibration.bf16=no",
        "--set", "calibration.shift_groups=6",
    ]  # fmt: skip
    assert cli_main([*argv, "--until", "groups"]) == 0  # no checkpoint needed to mine the groups
    write_labels_step(out)  # the labels step's output, as an endpoint would have written it
    assert cli_main(argv) == 0
    state = json.loads((out / "adapt.json").read_text())
    assert state["calibrate"]["on"] == "recipe" and (out / "model" / "model.safetensors").is_file()
    report = (out / "report.md").read_text()
    assert report.startswith("# Adaptation report: the bundled encoder on ") and "Corpus: " in report
