"""Training configs: unknown keys, overrides, validation, the shipped configs."""

import pytest
from pruner_model.training.config import ConfigError, load_config

from pruner_model.cli import main


def test_unknown_config_key_fails_clearly(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  warmup_steps: 100\n")
    with pytest.raises(ConfigError, match="unknown key train.warmup_steps"):
        load_config(bad)
    assert main(["train", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown key train.warmup_steps" in err[0]
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(None, ["nope.x=1"])
    with pytest.raises(ConfigError, match="train.lr"):
        load_config(None, ["train.lr=fast"])
    with pytest.raises(ConfigError, match="calibration.relative_floors"):
        load_config(None, ["calibration.relative_floors=[0.1,0]"])


def test_overrides_parse_types():
    cfg = load_config(None, ["train.lr=3e-5", "train.max_steps=7", "data.train=[a.jsonl,b.jsonl]"])
    assert cfg.train.lr == 3e-5 and cfg.train.max_steps == 7 and cfg.data.train == ["a.jsonl", "b.jsonl"]


def test_shipped_configs_load():
    for name in ("default", "reference", "gpu", "demo", "multilingual"):
        load_config(f"configs/{name}.yaml")


def test_report_slice_must_not_overlap_calibration():
    with pytest.raises(ConfigError, match="overlaps the calibration groups"):
        load_config(overrides=["data.calibration_dev_groups=2000", "data.report_dev_start=1500"])
    cfg = load_config(overrides=["data.report_dev_start=4000", "train.group_batches=true"])
    assert cfg.data.report_dev_start == 4000 and cfg.train.group_batches is True


def test_calibration_margin_and_loss_weights_are_validated():
    with pytest.raises(ConfigError, match="model.sentence_loss_weight must be >= 0"):
        load_config(None, ["model.sentence_loss_weight=-0.5"])
    with pytest.raises(ConfigError, match="margin"):
        load_config(None, ["calibration.target_evidence=0.99", "calibration.margin=0.05"])
    assert load_config(None, ["calibration.margin=0.01"]).calibration.margin == 0.01
    assert load_config(None, []).calibration.per_request_answer_shares == []  # off unless asked for
    shares = load_config(None, ["calibration.per_request_answer_shares=[0.1, 0.2]"]).calibration
    assert shares.per_request_answer_shares == [0.1, 0.2]
    for bad in ("[1.5]", "[0]", "0.1", "[true]"):
        with pytest.raises(ConfigError, match="calibration.per_request_answer_shares"):
            load_config(None, [f"calibration.per_request_answer_shares={bad}"])
    assert load_config(None, []).calibration.per_request_novelty == [0.95, 0.995]  # on by default
    assert load_config(None, ["calibration.per_request_novelty=null"]).calibration.per_request_novelty is None
    for bad in ("[0.95]", "[1.0, 0.99]", "[0.95, 0]", "0.95", "[true, 0.99]"):
        with pytest.raises(ConfigError, match="calibration.per_request_novelty"):
            load_config(None, [f"calibration.per_request_novelty={bad}"])
    assert load_config(None, []).calibration.unfamiliar_gate == 0.02
    assert load_config(None, ["calibration.unfamiliar_gate=null"]).calibration.unfamiliar_gate is None
    for bad in ("1.5", "-0.1", "true", "[0.02]"):
        with pytest.raises(ConfigError, match="calibration.unfamiliar_gate"):
            load_config(None, [f"calibration.unfamiliar_gate={bad}"])


def test_allocator_threshold_and_shift_groups_are_validated():
    import sys

    from pruner_model.core.memory import fix_mmap_threshold

    with pytest.raises(ConfigError, match="train.malloc_mmap_threshold must be >= 0"):
        load_config(None, ["train.malloc_mmap_threshold=-1"])
    with pytest.raises(ConfigError, match="train.malloc_trim_every must be >= 0"):
        load_config(None, ["train.malloc_trim_every=-1"])
    with pytest.raises(ConfigError, match="shift_groups"):
        load_config(None, ["calibration.shift_groups=0"])
    assert load_config(None, ["calibration.shifts=[noisy+mined]"]).calibration.shifts == ["noisy+mined"]
    for bad, error in [("[reddit]", "unknown slice 'reddit'"), ("[as_is]", "calibration groups themselves")]:
        with pytest.raises(ConfigError, match=error):
            load_config(None, [f"calibration.shifts={bad}"])
    assert fix_mmap_threshold(0) is False  # 0 leaves the allocator alone
    assert fix_mmap_threshold(65536) is (sys.platform.startswith("linux"))  # glibc here


def test_an_unknown_relevance_teacher_is_a_one_line_config_error(tmp_path):
    from pruner_model.training.config import ConfigError, ModelSection

    with pytest.raises(ConfigError, match=r"relevance_teacher: 'no-such-encoder' is neither one of"):
        ModelSection(relevance_teacher="no-such-encoder")
    folder = tmp_path / "encoder"
    folder.mkdir()
    with pytest.raises(ConfigError, match="config.json"):
        ModelSection(relevance_teacher=str(folder))
    (folder / "config.json").write_text("{}")
    assert ModelSection(relevance_teacher=str(folder)).relevance_teacher == str(folder)
    assert ModelSection(relevance_teacher="all-minilm-l6-v2").relevance_teacher == "all-minilm-l6-v2"
