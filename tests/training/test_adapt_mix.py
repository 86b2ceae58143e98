"""`pruner adapt`'s mix step: the blend of fine-tuned and starting weights, the choice of its
share under the forgetting allowance, the blend published whole (the fine-tuned weights kept),
and an interrupted publication finished by running the command again."""

from __future__ import annotations

import json
import os

import pytest
import torch
from pruner_model.core.modeling import PrunerModel
from pruner_model.training.interpolation import SHARES, Measured, choose_share, interpolated, search_shares

from pruner_model.cli import main as cli_main
from tests.training.helpers import labeled_documents, make_records


def _weights(folder) -> dict[str, torch.Tensor]:
    return PrunerModel.from_pretrained(str(folder)).state_dict()


def test_the_blend_lies_between_the_two_and_keeps_integer_buffers():
    start = {"w": torch.zeros(2, 3), "ids": torch.arange(4)}
    tuned = {"w": torch.full((2, 3), 4.0), "ids": torch.arange(4) + 1}
    assert torch.equal(interpolated(start, tuned, 0.0)["w"], start["w"])
    assert torch.equal(interpolated(start, tuned, 1.0)["w"], tuned["w"])
    half = interpolated(start, tuned, 0.25)
    assert torch.allclose(half["w"], torch.full((2, 3), 1.0)) and torch.equal(half["ids"], tuned["ids"])
    with pytest.raises(ValueError, match="different parameters"):
        interpolated(start, {"w": tuned["w"]}, 0.5)
    with pytest.raises(ValueError, match=r"is \(3,\) in the fine-tuned model and \(2, 3\)"):
        interpolated(start, {"w": torch.ones(3), "ids": tuned["ids"]}, 0.5)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        interpolated(start, tuned, 1.5)


def test_the_share_gains_most_on_your_text_within_the_allowance():
    rows = [
        Measured(1.0, 0.70, 0.800),
        Measured(0.75, 0.69, 0.830),
        Measured(0.5, 0.66, 0.845),
        Measured(0.25, 0.60, 0.850),
        Measured(0.0, 0.55, 0.856),
    ]
    share, reason = choose_share(rows, 0.02)
    assert share == 0.5 and "loses 0.011" in reason and "0.660" in reason
    assert choose_share(rows, 0.1)[0] == 1.0  # forgetting within the allowance: as trained
    assert choose_share(rows, 0.0)[0] == 0.0  # nothing may be lost: the checkpoint as it was
    rows[2] = Measured(0.5, None, 0.845)  # no threshold reaches the promise there: never preferred
    assert choose_share(rows, 0.02)[0] == 0.25
    no_general = [Measured(s, y, None) for s, y in ((1.0, 0.7), (0.5, 0.72), (0.0, 0.5))]
    assert choose_share(no_general, 0.02)[0] == 0.5
    with pytest.raises(ValueError, match="0.0"):
        choose_share(rows[:2], 0.02)


def test_the_search_halves_towards_the_largest_share_that_holds():
    visited = []

    def measure(share):  # forgetting grows with the share, as does the gain on your text
        visited.append(share)
        return Measured(share, 0.55 + 0.15 * share, 0.856 - 0.06 * share)

    for allowance, path, chosen in (
        (0.1, [0.0, 1.0], 1.0),  # the fine-tuned weights hold: two measurements
        (0.02, [0.0, 1.0, 0.5, 0.25], 0.25),
        (0.035, [0.0, 1.0, 0.5, 0.75], 0.5),
        (0.0, [0.0, 1.0, 0.5, 0.25], 0.0),
    ):
        visited.clear()
        rows = search_shares(measure, allowance)
        assert visited == path and [r.share for r in rows] == path
        assert choose_share(rows, allowance)[0] == chosen
    visited.clear()
    assert [r.share for r in search_shares(lambda s: Measured(s, 0.5, None), 0.02)] == [0.0, 1.0]


def test_adapt_publishes_the_chosen_blend_and_finishes_an_interrupted_one(tmp_path, tiny_checkpoint):
    path, _ = labeled_documents(tmp_path)
    general = tmp_path / "general.jsonl"
    recs = make_records(n_groups=20, per_group=3)
    general.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "adapted"
    argv = [
        "adapt", "--labeled", str(path), "--model", str(tiny_checkpoint), "--output", str(out),
        "--replay", "--epochs", "1", "--dtype", "fp32", "--general-dev", str(general), "--general-groups", "8",
        "--forget-allowance", "0", "--until", "mix",
        "--set", "train.max_steps=3", "--set", "train.batch_size=4", "--set", "train.mixed_precision=no",
        "--set", "train.lr=5e-3", "--set", "model.relevance_distill_weight=0",
    ]  # fmt: skip
    assert cli_main(argv) == 0
    mix = json.loads((out / "adapt.json").read_text())["mix"]
    shares = [r["share"] for r in mix["rows"]]
    assert shares[:2] == [0.0, 1.0] and len(shares) in (2, 4) and set(shares) <= set(SHARES)
    assert mix["share"] in shares
    assert mix["general"] == {"file": str(general), "groups": 8}  # groups 8-15: the report uses 0-7
    start_general = mix["rows"][-1]["general"]
    chosen = next(r for r in mix["rows"] if r["share"] == mix["share"])
    assert chosen["general"] >= start_general - 1e-9  # allowance 0: general text loses nothing
    start = _weights(tiny_checkpoint)
    trained = _weights(out / "model.trained") if mix["share"] != 1.0 else _weights(out / "model")
    assert any(not torch.equal(start[k], trained[k]) for k in start)  # fine-tuning moved the weights
    expected = interpolated(start, trained, mix["share"])
    published = _weights(out / "model")
    assert all(torch.allclose(published[k], expected[k], atol=1e-6) for k in expected)

    # a blend written at share 0.5 was interrupted between its two moves: the fine-tuned weights
    # are in model.trained and no model folder is there; the command finishes the step again
    state = json.loads((out / "adapt.json").read_text())
    state["mix"] = None
    (out / "adapt.json").write_text(json.dumps(state))
    if (out / "model.trained").is_dir():
        import shutil

        shutil.rmtree(out / "model")
    else:
        os.replace(out / "model", out / "model.trained")
    assert cli_main(argv) == 0
    again = json.loads((out / "adapt.json").read_text())["mix"]
    assert again["share"] == mix["share"]
    assert all(torch.equal(_weights(out / "model.trained")[k], trained[k]) for k in trained)
    published = _weights(out / "model")
    assert all(torch.allclose(published[k], expected[k], atol=1e-6) for k in expected)
    assert not (out / "model.mixing").exists()


def test_without_general_text_or_with_none_the_weights_stay_as_trained(tmp_path, tiny_checkpoint, capsys):
    path, _ = labeled_documents(tmp_path)
    base = [
        "adapt", "--labeled", str(path), "--model", str(tiny_checkpoint), "--replay", "--epochs", "1",
        "--dtype", "fp32", "--until", "mix",
        "--set", "train.max_steps=1", "--set", "train.batch_size=4", "--set", "train.mixed_precision=no",
        "--set", "model.relevance_distill_weight=0",
    ]  # fmt: skip
    assert cli_main([*base, "--output", str(tmp_path / "a")]) == 0
    mix = json.loads((tmp_path / "a" / "adapt.json").read_text())["mix"]
    assert mix["share"] == 1.0 and "--general-dev" in mix["reason"]
    assert "no general text" in capsys.readouterr().err
    small = tmp_path / "small.jsonl"  # no groups left after the report's 400
    small.write_text("".join(json.dumps(r) + "\n" for r in make_records(n_groups=5, per_group=2)))
    assert cli_main([*base, "--output", str(tmp_path / "d"), "--general-dev", str(small)]) == 0
    mix = json.loads((tmp_path / "d" / "adapt.json").read_text())["mix"]
    assert mix["share"] == 1.0 and "has no groups after the 400 the report measures" in mix["reason"]
    assert cli_main([*base, "--output", str(tmp_path / "b"), "--forget-allowance", "none"]) == 0
    mix = json.loads((tmp_path / "b" / "adapt.json").read_text())["mix"]
    assert mix["share"] == 1.0 and "none" in mix["reason"] and not (tmp_path / "b" / "model.trained").exists()
    with pytest.raises(SystemExit) as exited:  # argparse's usage line and error
        cli_main([*base, "--output", str(tmp_path / "c"), "--forget-allowance", "lots"])
    assert exited.value.code == 2
    assert "a number in [0, 1] or none" in capsys.readouterr().err


def test_a_blend_is_published_whole_beside_the_fine_tuned_weights(tmp_path, tiny_checkpoint):
    import shutil

    from pruner_model.adaptation.mix import TRAINED, _publish

    from pruner_model import ContextPruner

    out = tmp_path / "adapted"
    shutil.copytree(tiny_checkpoint, out / "model")
    model = PrunerModel.from_pretrained(str(out / "model"))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(str(out / "model"))  # stands in for the fine-tuned weights
    start, tuned = _weights(tiny_checkpoint), _weights(out / "model")
    model.load_state_dict(interpolated(start, tuned, 0.5))
    _publish(model, out / "model", out)
    assert sorted(p.name for p in (out / "model").iterdir()) == sorted(
        p.name for p in tiny_checkpoint.iterdir()
    )
    kept, published = _weights(out / TRAINED), _weights(out / "model")
    assert all(torch.equal(kept[k], tuned[k]) for k in tuned)
    for k, w in published.items():
        if w.is_floating_point():
            assert torch.allclose(w, (start[k] + tuned[k]) / 2, atol=1e-6)
    assert not (out / "model.mixing").exists()
    passages = ["Paris is the capital of France. It lies on the Seine.", "Bananas are yellow."]
    result = ContextPruner.from_pretrained(out / "model", dtype="fp32").prune(
        "What is the capital?", passages
    )
    assert 0 <= result.stats.compression <= 1


def test_a_missing_general_file_is_refused_before_training(tmp_path, tiny_checkpoint, capsys):
    path, _ = labeled_documents(tmp_path)
    out = tmp_path / "o"
    argv = ["adapt", "--labeled", str(path), "--model", str(tiny_checkpoint), "--output", str(out)]
    assert cli_main([*argv, "--general-dev", str(tmp_path / "gone.jsonl")]) == 2
    assert "--general-dev" in capsys.readouterr().err and not (out / "model").exists()
    assert cli_main([*argv, "--general-dev", str(path), "--general-groups", "0"]) == 2
    assert "--general-groups must be >= 1" in capsys.readouterr().err


def test_the_report_reuses_the_checkpoints_scores_of_the_mix_step(tmp_path, tiny_checkpoint, monkeypatch):
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.sources import ScoreMemo, measure_sample
    from pruner_model.inference import ContextPruner
    from pruner_model.training.adapt import sample_of

    reused = []
    get = ScoreMemo.get

    def recording_get(self, *args):
        found = get(self, *args)
        reused.append(found is not None)
        return found

    monkeypatch.setattr(ScoreMemo, "get", recording_get)
    path, _ = labeled_documents(tmp_path)
    general = tmp_path / "general.jsonl"
    general.write_text("".join(json.dumps(r) + "\n" for r in make_records(n_groups=20, per_group=3)))
    out = tmp_path / "adapted"
    argv = [
        "adapt", "--labeled", str(path), "--model", str(tiny_checkpoint), "--output", str(out),
        "--replay", "--epochs", "1", "--dtype", "fp32", "--general-dev", str(general), "--general-groups", "8",
        "--set", "train.max_steps=3", "--set", "train.batch_size=4", "--set", "train.mixed_precision=no",
        "--set", "train.lr=5e-3", "--set", "model.relevance_distill_weight=0",
    ]  # fmt: skip
    assert cli_main(argv) == 0
    assert reused == [False, True]  # filled by the mix step's share 0, read by the report
    state = json.loads((out / "adapt.json").read_text())
    recalibrated = state["report"]["rows"]["checkpoint recalibrated on your calibration split"]["threshold"]
    settings = state["settings"]
    sample = sample_of(
        read_jsonl(out / "data" / "calibration.jsonl"), settings["sample_groups"], settings["seed"]
    )
    base = ContextPruner.from_pretrained(tiny_checkpoint, backend="torch", dtype="fp32")
    fresh = measure_sample(base, sample, settings["target"], settings["confidence"], None, settings["seed"])
    assert recalibrated == pytest.approx(fresh["threshold"], rel=1e-6)  # the same as scoring it again
