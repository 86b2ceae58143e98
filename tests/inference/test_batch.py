"""Batch pruning from the CLI: resumable, sharded by a stable hash, shards add up to the whole."""

import json

import pytest
from pruner_model.core.records import parse_shard, shard_of, writing_marker

from pruner_model.cli import main

TIMINGS = ("encoder_seconds", "postprocess_seconds")


def groups(n=24):
    return [
        {
            "id": f"doc/{i}",
            "query": f"When was tower {i} built?",
            "passages": [
                f"Tower {i} was built in {1800 + i}. It is tall.",
                {"id": "b", "text": "Bananas are yellow."},
            ],
        }
        for i in range(n)
    ]


def prune_argv(model, src, out, *extra) -> list[str]:
    """`pruner prune --input SRC --output OUT` over ``model``, then ``extra``."""
    return ["prune", "--model", str(model), "--input", str(src), "--output", str(out), *extra]


def lines(path):
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        for k in TIMINGS:
            r["stats"].pop(k)
        out[r["id"]] = r
    return out


def test_shards_add_up_and_runs_resume(tiny_checkpoint, tmp_path, capsys):
    src = tmp_path / "groups.jsonl"
    src.write_text("".join(json.dumps(g) + "\n" for g in groups()))
    base = ["prune", "--model", str(tiny_checkpoint), "--input", str(src), "--threshold", "0.5"]
    whole = tmp_path / "whole.jsonl"
    assert main([*base, "--output", str(whole), "--batch-size", "5"]) == 0
    assert "24 groups pruned" in capsys.readouterr().err
    parts = [tmp_path / f"part{k}.jsonl" for k in range(2)]
    for k, part in enumerate(parts):
        assert main([*base, "--output", str(part), "--shard", f"{k}/2"]) == 0
    a, b = lines(parts[0]), lines(parts[1])
    assert a and b and not set(a) & set(b)
    assert {**a, **b} == lines(whole)
    # a crash mid-write (the run's marker left behind): the half line is cut off and the run
    # finishes the rest, each id once
    text = whole.read_text().splitlines(keepends=True)
    whole.write_text("".join(text[:10]) + text[10][: len(text[10]) // 2])
    writing_marker(whole).write_text("{}\n")
    assert main([*base, "--output", str(whole)]) == 0
    assert not writing_marker(whole).exists()
    assert "14 groups pruned" in capsys.readouterr().err and lines(whole).keys() == {
        g["id"] for g in groups()
    }
    assert len(whole.read_text().splitlines()) == 24
    assert main([*base, "--output", str(whole)]) == 0
    err = capsys.readouterr().err
    assert "0 groups pruned" in err and "24 already in" in err


def test_shard_parsing_and_stability():
    assert parse_shard("1/4") == (1, 4) and parse_shard(None) == (0, 1)
    for bad in ("4/4", "x/2", "1", "-1/2"):
        with pytest.raises(ValueError, match="--shard must be K/N"):
            parse_shard(bad)
    assert shard_of("doc/7", 5) == shard_of("doc/7", 5)  # no per-process hash salt
    assert len({shard_of(f"g{i}", 4) for i in range(100)}) == 4


def test_bad_batch_input_is_one_line(tiny_checkpoint, tmp_path, capsys):
    src = tmp_path / "g.jsonl"
    src.write_text('{"id": "a", "query": "q?", "passages": ["x."]}\n{"query": "no id"}\n')
    argv = prune_argv(tiny_checkpoint, src, tmp_path / "o.jsonl")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [
        f"error: {src}:2: expected {{id, query, passages}}"
    ]
    assert main([*argv, "--shard", "2/2"]) == 2
    assert main([*argv[:-2]]) == 2 and "needs --output" in capsys.readouterr().err


def test_a_second_run_on_an_output_another_live_run_writes_is_refused(tiny_checkpoint, tmp_path, capsys):
    """Two `pruner prune --input` runs on one --output: the second is refused while the first is
    alive (its half-written last line is not cut), and takes over once it has stopped."""
    import subprocess
    import sys

    src = tmp_path / "groups.jsonl"
    src.write_text("".join(json.dumps(g) + "\n" for g in groups()))
    out = tmp_path / "out.jsonl"
    argv = prune_argv(tiny_checkpoint, src, out, "--threshold", "0.5")
    first, second = (g["id"] for g in groups()[:2])
    out.write_text(json.dumps({"id": first}) + "\n" + json.dumps({"id": second})[:9])  # a half line
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        writing_marker(out).write_text(json.dumps({"pid": writer.pid}) + "\n")
        assert main(argv) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"being written by another run (pid {writer.pid})" in err[0]
        assert out.read_text().endswith(json.dumps({"id": second})[:9]) and writing_marker(out).exists()
    finally:
        writer.kill()
        writer.wait()
    assert main(argv) == 0  # that run stopped: its marker is taken over, its half line cut
    assert not writing_marker(out).exists() and len(out.read_text().splitlines()) == 24  # each id once
