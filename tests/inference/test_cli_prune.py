import json

import pytest

from pruner_model.cli import main


@pytest.fixture
def passages_file(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(["Paris is in France. It is big.", {"id": "x", "text": "Rome is in Italy."}]))
    return path


def test_prune_text_json_html(tiny_checkpoint, passages_file, tmp_path, capsys):
    assert (
        main(
            [
                "prune",
                "--model",
                str(tiny_checkpoint),
                "--query",
                "Where is Paris?",
                "--passages",
                str(passages_file),
                "--threshold",
                "0",
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert "Paris is in France. It is big." in out.out and "compression" in out.err
    out_json = tmp_path / "r.json"
    assert (
        main(
            [
                "prune",
                "--model",
                str(tiny_checkpoint),
                "--query",
                "Where?",
                "--passages",
                str(passages_file),
                "--format",
                "json",
                "--output",
                str(out_json),
            ]
        )
        == 0
    )
    data = json.loads(out_json.read_text())
    assert data["passages"][1]["id"] == "x"
    out_html = tmp_path / "r.html"
    assert (
        main(
            [
                "prune",
                "--model",
                str(tiny_checkpoint),
                "--query",
                "Where?",
                "--passages",
                str(passages_file),
                "--format",
                "html",
                "--output",
                str(out_html),
            ]
        )
        == 0
    )
    page = out_html.read_text()
    assert "title='score" in page and "Rome is in Italy." in page


def _one_error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    return err[0]


def test_missing_model_folder(tmp_path, passages_file, capsys):
    assert (
        main(["prune", "--model", str(tmp_path / "none"), "--query", "q", "--passages", str(passages_file)])
        != 0
    )
    assert "not found" in _one_error_line(capsys)


def test_empty_query(tiny_checkpoint, passages_file, capsys):
    assert (
        main(["prune", "--model", str(tiny_checkpoint), "--query", " ", "--passages", str(passages_file)])
        != 0
    )
    assert "empty" in _one_error_line(capsys)


def test_malformed_json(tiny_checkpoint, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('["unterminated')
    assert main(["prune", "--model", str(tiny_checkpoint), "--query", "q", "--passages", str(bad)]) != 0
    assert "malformed JSON" in _one_error_line(capsys)
    badl = tmp_path / "bad.jsonl"
    badl.write_text('{"text": "ok"}\n{nope\n')
    assert main(["prune", "--model", str(tiny_checkpoint), "--query", "q", "--passages", str(badl)]) != 0
    assert ":2: malformed JSON" in _one_error_line(capsys)


def test_non_utf8_file(tiny_checkpoint, tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    assert main(["prune", "--model", str(tiny_checkpoint), "--query", "q", "--passages", str(bad)]) != 0
    assert "not UTF-8" in _one_error_line(capsys)


def test_output_not_half_written_on_error(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "out.json"
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert (
        main(
            [
                "prune",
                "--model",
                str(tiny_checkpoint),
                "--query",
                "q",
                "--passages",
                str(bad),
                "--output",
                str(out),
            ]
        )
        != 0
    )
    assert not out.exists()
    _one_error_line(capsys)


def test_unknown_command(capsys):
    assert main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err
