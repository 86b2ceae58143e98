"""`pruner adapt --labeled`: the split by document, the fine-tuning config, and the whole command on
a tiny checkpoint (every step, the report, resuming without training again, refusing a folder
that holds another adaptation)."""

from __future__ import annotations

import json

import pytest
from pruner_model.training.adapt import (
    SPLITS,
    AdaptSettings,
    general_calibration_config,
    split_of,
    split_records,
    training_config,
)

from pruner_model.cli import main as cli_main
from tests.training.helpers import labeled_documents, make_records


def test_groups_of_one_document_land_in_one_split_the_same_every_time(tmp_path):
    path, recs = labeled_documents(tmp_path)
    settings = AdaptSettings(labeled=[str(path)], model="unused", output=str(tmp_path / "out"))
    counts = split_records(settings, tmp_path / "out")
    assert sum(c["groups"] for c in counts.values()) == 40
    where = {}
    for s in SPLITS:
        for line in (tmp_path / "out" / "data" / f"{s}.jsonl").read_text().splitlines():
            r = json.loads(line)
            assert r["source"] == "user" and r["meta"]["source"] == "user"
            assert where.setdefault(r["title"], s) == s  # one document, one split
    assert len(set(where.values())) == 3
    assert split_of("doc3", (0.6, 0.2, 0.2), 0) == split_of("doc3", (0.6, 0.2, 0.2), 0)


def test_a_split_without_an_answer_is_one_clear_error(tmp_path):
    path, _ = labeled_documents(tmp_path, n_groups=2, documents=2)
    settings = AdaptSettings(labeled=[str(path)], model="unused", output=str(tmp_path / "out"))
    with pytest.raises(ValueError, match="split has no question with an answer"):
        split_records(settings, tmp_path / "out")
    assert not (tmp_path / "out" / "data").exists()  # checked before anything was written


def test_the_fine_tuning_config_replays_the_recipes_sources_by_weight(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    replay = tmp_path / "general.jsonl"
    general = make_records(n_groups=4)
    for i, r in enumerate(general):
        r["source"] = "squad" if i % 2 else "nq"
    replay.write_text("".join(json.dumps(r) + "\n" for r in general))
    (ckpt / "train_config.yaml").write_text(
        f"model: {{max_length: 128, relevance_loss_weight: 1.0}}\ndata: {{train: [{replay}], mix: {{squad: 3, nq: 1}}}}\n"
        "train: {lr: 8.0e-5, malloc_mmap_threshold: 0}\n"
    )
    s = AdaptSettings(labeled=[], model=str(ckpt), output=str(tmp_path / "o"), replay_share=0.4)
    cfg = training_config(s, tmp_path / "o", train_groups=300)
    assert cfg["model"]["init_from"] == str(ckpt) and cfg["model"]["max_length"] == 128
    assert cfg["data"]["train"] == [str(tmp_path / "o" / "data" / "train.jsonl"), str(replay)]
    assert cfg["data"]["max_train_groups"] == 500  # 300 of yours are 60% of them
    assert cfg["data"]["mix"] == pytest.approx({"user": 0.6, "squad": 0.3, "nq": 0.1})
    assert cfg["calibration"] == {"enabled": False} and cfg["train"]["lr"] == 8.0e-5
    # the fine-tuning maps its largest blocks whatever the checkpoint trained with (flat memory)
    assert cfg["train"]["malloc_mmap_threshold"] == 16 * 1024 * 1024
    assert cfg["model"]["attention_dropout"] == 0.0  # the fused attention kernel, whatever the recipe
    s.replay = []
    assert training_config(s, tmp_path / "o", 300)["data"]["mix"] == {"user": 1.0}
    s.max_train_groups = 100  # a point of a learning curve: 100 of the 300
    assert training_config(s, tmp_path / "o", 300)["data"]["max_train_groups"] == 100


def test_adapt_runs_every_step_reports_and_resumes(tmp_path, tiny_checkpoint, capsys):
    path, _ = labeled_documents(tmp_path)
    out = tmp_path / "adapted"
    argv = [
        "adapt", "--labeled", str(path), "--model", str(tiny_checkpoint), "--output", str(out),
        "--replay", "--epochs", "1", "--dtype", "fp32", "--general-dev", str(path), "--general-groups", "8",
        "--set", "train.max_steps=2", "--set", "train.batch_size=4", "--set", "train.mixed_precision=no",
        "--set", "model.relevance_distill_weight=0",
    ]  # fmt: skip
    assert cli_main(argv) == 0
    state = json.loads((out / "adapt.json").read_text())
    assert all(state[k] is not None for k in ("split", "train", "calibrate", "report"))
    assert state["calibrate"]["on"] == "yours"  # the tiny checkpoint has no calibration recipe to join
    rows = state["report"]["rows"]
    assert len(rows) == 3 and all(0 <= m["compression"] <= 1 for m in rows.values())
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["threshold"] == pytest.approx(state["calibrate"]["threshold"])
    report = (out / "report.md").read_text()
    assert "adapted, calibrated on your calibration split" in report
    mix = state["mix"]  # the blend's share, chosen on --general-dev's groups 8-15 and shown
    assert mix["general"]["groups"] == 8 and f"| {mix['share']:g} | " in report and "Weights: " in report
    kept, compression = state["report"]["general"]["defaults"]["adapted"]
    assert 0 <= kept <= 1 and 0 <= compression <= 1
    assert f"adapted {kept:.3f} / {compression:.3f}" in report  # the promise on general text, shown
    weights = (out / "model" / "model.safetensors").stat().st_mtime_ns
    assert cli_main(argv) == 0  # everything done: nothing is trained again
    assert (out / "model" / "model.safetensors").stat().st_mtime_ns == weights
    other = [*argv[:-1], "model.relevance_distill_weight=0", "--seed", "3"]
    assert cli_main(other) != 0
    assert "holds an adaptation with another seed" in capsys.readouterr().err


def test_calibrating_on_both_puts_your_split_beside_the_checkpoints_own_slices(
    tmp_path, tiny_checkpoint, monkeypatch
):
    import pruner_model.evaluation.calibrate as calibration

    monkeypatch.setattr(calibration, "MIN_POINT_QUERIES", 1)  # tiny splits still name their own point
    path, _ = labeled_documents(tmp_path)
    general = make_records(n_groups=30, per_group=3)
    for r in general:
        r["source"] = "general"
    dev = tmp_path / "general.jsonl"
    dev.write_text("".join(json.dumps(r) + "\n" for r in general))
    (tiny_checkpoint / "train_config.yaml").write_text(
        f"data:\n  train: []\n  dev: [{dev}]\n  calibration_dev_groups: 30\n  seed: 5\n"
        "calibration:\n  target_evidence: 0.9\n  relative_floors: []\n  relevance_exponents: []\n"
        "  shifts: []\n"
    )
    settings = AdaptSettings(labeled=[str(path)], model=str(tiny_checkpoint), output=str(tmp_path / "o"))
    recipe = general_calibration_config(settings, tmp_path / "o")
    assert recipe["data"]["dev"] == [str(dev)] and recipe["data"]["seed"] == 5  # the recipe's groups
    assert recipe["data"]["calibration_sources"] == [str(tmp_path / "o" / "data" / "calibration.jsonl")]
    assert recipe["calibration"]["enabled"] and recipe["calibration"]["target_evidence"] == 0.9
    out = tmp_path / "adapted"
    argv = [
        "adapt", "--labeled", str(path), "--model", str(tiny_checkpoint), "--output", str(out),
        "--replay", "--epochs", "1", "--dtype", "fp32",
        "--set", "train.max_steps=2", "--set", "train.batch_size=4", "--set", "train.mixed_precision=no",
        "--set", "model.relevance_distill_weight=0", "--set", "calibration.bf16=no",
    ]  # fmt: skip
    assert cli_main(argv) == 0
    state = json.loads((out / "adapt.json").read_text())
    cal = state["calibrate"]
    assert cal["on"] == "both"
    assert {"as_is", "source:user"} <= set(cal["slice_thresholds"])  # your text and the recipe's, together
    assert cal["threshold"] <= min(cal["slice_thresholds"].values()) + 1e-12
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["threshold"] == pytest.approx(cal["threshold"])
    user = config["operating_points"]["user"]  # your text alone, as a named point
    rows = state["report"]["rows"]
    assert "adapted, calibrated on your calibration split and the checkpoint's own" in rows
    mine = rows['adapted, at its "user" operating point (your text alone)']
    assert mine["threshold"] == pytest.approx(user["threshold"]) and 0 <= mine["compression"] <= 1
    (tiny_checkpoint / "train_config.yaml").write_text(f"data:\n  dev: [{tmp_path / 'gone.jsonl'}]\n")
    assert general_calibration_config(settings, tmp_path / "o") is None  # its files are not here
