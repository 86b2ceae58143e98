"""The default model that ships inside the package: it loads with no argument, it is what it says
it is (bf16 safetensors under 50 MB, trained on sets a distributed model may use, a card with its
data and licences), and it still measures what its card says on a fixed slice of held-back groups
(fails when the weights, the scoring or the calibration drift). A short real training run on the
public QA files checks the recipe that built it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pruner_model import DEFAULT_MODEL, ContextPruner

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "data" / "qa" / "heldout.jsonl"
needs_corpus = pytest.mark.skipif(
    not HELDOUT.is_file(), reason="data/qa is not built here (pruner data qa --from DIR; .ci/run builds it)"
)


@pytest.fixture(scope="module")
def shipped():
    return ContextPruner.from_pretrained()


@pytest.fixture(scope="module")
def shipped_fp32():
    """The shipped model as its card was measured: torch fp32, whatever int8 export a cache holds."""
    return ContextPruner.from_pretrained(backend="torch", dtype="fp32")


def test_from_pretrained_with_no_argument_is_the_shipped_model(shipped):
    assert Path(shipped.source) == DEFAULT_MODEL
    result = shipped.prune(
        "Who built the metal framework of the Statue of Liberty?",
        json.loads((ROOT / "examples" / "passages.json").read_text()),
    )
    kept = result.text
    assert "Gustave Eiffel" in kept and 0.3 < result.stats.compression < 1.0
    assert "Louvre" not in kept  # a passage with nothing on the question


def test_the_shipped_folder_is_bf16_safetensors_within_50_mb_with_its_card():
    from safetensors import safe_open

    files = {p.name: p.stat().st_size for p in DEFAULT_MODEL.iterdir()}
    assert sum(files.values()) <= 50 * 1024 * 1024
    assert "model.safetensors" in files and not any(n.endswith((".bin", ".pt", ".pkl")) for n in files)
    with safe_open(str(DEFAULT_MODEL / "model.safetensors"), "pt") as f:
        dtypes = {str(f.get_slice(k).get_dtype()) for k in f.keys()}
    assert dtypes <= {"BF16", "I64"} and "BF16" in dtypes
    card = (DEFAULT_MODEL / "README.md").read_text()
    for name in ("squad", "new_wiki", "tydiqa_en", "selqa", "tweetqa", "boolq", "pubmedqa", "CC BY-SA 4.0"):
        assert name in card
    assert "## Measured on held-back data" in card


def test_it_was_trained_only_on_sets_a_distributed_model_may_use():
    import yaml
    from pruner_model.annotation.public_qa import HELDOUT_SETS, SETS

    metrics = json.loads((DEFAULT_MODEL / "metrics.json").read_text())
    mix = (metrics.get("config") or {}).get("data", {}).get("mix") or yaml.safe_load(
        (ROOT / "configs" / "default.yaml").read_text()
    )["data"]["mix"]
    assert mix and all(SETS[name].distributable and name not in HELDOUT_SETS for name in mix)


def test_every_command_defaults_to_it(tmp_path, capsys):
    from pruner_model.cli import main

    passages = str(ROOT / "examples" / "passages.json")
    assert (
        main(["prune", "--query", "Who designed the statue?", "--passages", passages, "--format", "json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["passages"] and "Bartholdi" in out["text"]


@needs_corpus
@pytest.mark.slow
def test_it_holds_to_its_card_on_the_fixed_check_slice(shipped_fp32):
    """The card's check slice: groups 0-99 of each held-out set's permutation, measured when the model
    was shipped (evaluation.json's ``check``). Another CPU class or precision may move a few
    decisions; a change of weights, scoring or calibration moves more."""
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.sources import evaluate_sources

    check = json.loads((DEFAULT_MODEL / "evaluation.json").read_text())["check"]
    now = evaluate_sources(shipped_fp32, list(read_jsonl(HELDOUT)), max_groups=check["max_groups"])
    for name, then in check["sets"].items():
        at = now[name]["at_checkpoint_threshold"]
        assert abs(at["evidence_preserved"] - then["evidence_preserved"]) <= 0.03, name
        assert abs(at["compression"] - then["compression"]) <= 0.02, name


@needs_corpus
@pytest.mark.slow
def test_a_short_run_of_the_default_recipe_on_the_public_files_learns_to_rank(tmp_path):
    """configs/default.yaml on 200 training groups of data/qa, calibrated on 100: the run publishes
    a calibrated checkpoint whose relevance head ranks the gold passage first far above chance (1 in
    5) on the training sets' held-back documents."""
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.sources import evaluate_sources

    from pruner_model.cli import main

    run = tmp_path / "run"
    small = {
        "data.max_train_groups": 200,
        "data.calibration_dev_groups": 100,
        "data.calibration_source_groups": 20,
        "data.max_dev_groups": 20,
        "calibration.shift_groups": 20,
        "calibration.shifts": "[noisy]",
    }
    overrides = [arg for k, v in small.items() for arg in ("--set", f"{k}={v}")]
    assert (
        main(["train", "--config", str(ROOT / "configs" / "default.yaml"), "--output", str(run), *overrides])
        == 0
    )
    config = json.loads((run / "config.json").read_text())
    assert 0.0 < config["threshold"] < 1.0
    trained = ContextPruner.from_pretrained(run)
    report = evaluate_sources(trained, list(read_jsonl(HELDOUT.with_name("dev.jsonl"))), max_groups=40)
    firsts = [m["ranking"]["gold_first"] for m in report.values() if m["ranking"]["gold_first"] is not None]
    assert firsts and sum(firsts) / len(firsts) > 0.4


def test_calibrate_refuses_to_rewrite_the_packages_model(tmp_path, capsys):
    from pruner_model.cli import main

    before = (DEFAULT_MODEL / "config.json").read_bytes()
    data = ROOT / "examples" / "labeled.jsonl"
    assert main(["calibrate", "--model", str(DEFAULT_MODEL), "--data", str(data)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "copy it first" in err[0]
    assert (DEFAULT_MODEL / "config.json").read_bytes() == before


@pytest.mark.slow
def test_its_export_runs_every_layer_in_int8_with_no_labels_at_hand(tmp_path):
    """The shipped folder carries the channel maxima of its labeled int8 export: `pruner export
    --quantize int8` smooths with them (no data needed) and keeps the graph only where it agrees."""
    from pruner_model.export.onnx import export_onnx

    report = export_onnx(DEFAULT_MODEL, tmp_path / "onnx", quantize="int8")
    assert report["int8_scheme"] == "smoothed" and report["int8_ok"], report
    assert "int8_smoothing.safetensors" in report["int8_smoothed_on"]
    assert not any("/output/dense/" in n for n in report["int8_fp32_nodes"])  # only the heads stay fp32


def test_shipping_carries_the_int8_maxima_and_says_so_in_the_card(tmp_path, tiny_checkpoint):
    import numpy as np
    from pruner_model.training.ship import ship
    from safetensors.numpy import save_file

    (tiny_checkpoint / "README.md").write_text("# tiny: a context pruner\n")
    maxima = {"layer.0": np.ones(37, np.float32)}
    save_file(
        maxima, str(tiny_checkpoint / "int8_smoothing.safetensors"), metadata={"source": "3 groups of x"}
    )
    out = ship(tiny_checkpoint, tmp_path / "shipped")
    assert (out / "int8_smoothing.safetensors").read_bytes() == (
        tiny_checkpoint / "int8_smoothing.safetensors"
    ).read_bytes()
    card = (out / "README.md").read_text()
    assert "## int8" in card and "3 groups of x" in card


def test_new_measurements_replace_the_cards_section_and_nothing_else(tmp_path):
    from pruner_model.training.ship import refresh_measurements

    folder = tmp_path / "shipped"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    card = "# m\n\n## Operating point\n\ntext\n\n## Measured on held-back data\n\nold | table\n\n## int8\n\nkept\n"
    (folder / "README.md").write_text(card)
    evaluation = tmp_path / "eval"
    for split, name in (("dev", "squad"), ("heldout", "friendsqa")):
        verdict = "met" if split == "dev" else "missed"
        at = {
            "evidence_preserved": 0.9,
            "compression": 0.5,
            "promise": {"interval": [0.8, 0.95], "verdict": verdict, "target": 0.95},
        }
        report = {
            "max_groups": 300,
            "sources": {
                name: {
                    "groups": 300,
                    "at_checkpoint_threshold": at,
                    "tokens_kept_at_checkpoint": {"answerless": 0.2},
                    "compression_at_0.95": 0.4,
                    "ranking": {"gold_first": 0.7},
                }
            },
        }
        (evaluation / split).mkdir(parents=True)
        (evaluation / split / "sources.json").write_text(json.dumps(report))
    refresh_measurements(folder, evaluation)
    new = (folder / "README.md").read_text()
    assert "old | table" not in new and "| friendsqa | heldout | 300 | 0.900 [0.800, 0.950] | 0.500" in new
    assert "holds or is within chance on squad; it is missed on friendsqa (0.900 kept)" in new
    assert new.startswith("# m\n\n## Operating point\n\ntext\n\n## Measured on held-back data\n")
    assert new.endswith("\n\n## int8\n\nkept\n") and new.count("## Measured") == 1
    assert json.loads((folder / "evaluation.json").read_text())["sets"]["squad"]["compression"] == 0.5
    assert (folder / "model.safetensors").read_bytes() == b"weights"
    (folder / "README.md").write_text("# no such section\n")
    with pytest.raises(ValueError, match="no '## Measured on held-back data' section"):
        refresh_measurements(folder, evaluation)
