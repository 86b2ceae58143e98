"""`pruner calibrate`: the default threshold calibrated on a labeled sample of the user's text."""

from __future__ import annotations

import json

from pruner_model.cli import main
from tests.conftest import read_threshold
from tests.evaluation.test_evaluate import records


def _data(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records()))
    return data


def test_calibrate_writes_the_threshold_the_sample_needs(tmp_path, tiny_checkpoint, capsys):
    data = _data(tmp_path)
    before = read_threshold(tiny_checkpoint)
    base = ["calibrate", "--model", str(tiny_checkpoint), "--data", str(data), "--target-evidence", "1.0"]
    assert main([*base, "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "3 groups (3 with an answer)" in err and "the checkpoint's default (threshold)" in err
    assert read_threshold(tiny_checkpoint) == before  # a dry run writes nothing
    line = next(x for x in err.splitlines() if "calibrated here" in x)
    threshold = float(line.split("threshold ")[1].split()[0])
    assert "kept 1.000 of answers" in line

    assert main(base) == 0
    assert abs(read_threshold(tiny_checkpoint) - threshold) < 1e-4
    assert "wrote threshold" in capsys.readouterr().err

    assert main([*base, "--name", "mine"]) == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "calibrated here" in x)
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    assert (
        abs(config["operating_points"]["mine"]["threshold"] - float(line.split("threshold ")[1].split()[0]))
        < 1e-4
    )
    assert "wrote operating point 'mine'" in err


def test_calibrate_refuses_bad_settings_in_one_line(tmp_path, tiny_checkpoint, capsys):
    data = _data(tmp_path)
    base = ["calibrate", "--model", str(tiny_checkpoint), "--data", str(data)]
    for extra, message in (
        (["--target-evidence", "1.5"], "--target-evidence must be in (0, 1]"),
        (["--confidence", "0.3"], "--confidence must be in [0.5, 1)"),
        (["--name", ""], "--name needs"),
    ):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "Traceback" not in err and len(err.splitlines()) == 1, err
    none = tmp_path / "none.jsonl"
    none.write_text(json.dumps({**records()[1], "relevant_spans": []}) + "\n")
    assert main(["calibrate", "--model", str(tiny_checkpoint), "--data", str(none)]) == 2
    assert "no group of the data has an answer" in capsys.readouterr().err
