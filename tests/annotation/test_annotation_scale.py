"""Labeling at scale: the Batch API path (files + batches routes of a scripted local endpoint) and
sharded labeling by several processes, each checked against the plain online run."""

import json
import subprocess
import sys

import pytest
from pruner_model.annotation.batch_api import BatchLabeler
from pruner_model.annotation.llm import Annotator
from pruner_model.core.records import read_jsonl

from pruner_model.cli import main
from tests.annotation.test_annotation import groups, settings
from tests.fake_openai import FakeOpenAI


def _online(tmp_path, gs):
    out = tmp_path / "online.jsonl"
    with FakeOpenAI() as fake:
        Annotator(settings(fake.url)).run(gs, out, tmp_path / "online.rejects.jsonl")
    return sorted(read_jsonl(out), key=lambda r: r["id"])


def test_batch_api_gives_the_online_labels_at_the_batch_price(tmp_path):
    gs = groups(4)
    out, rej = tmp_path / "b.jsonl", tmp_path / "b.rejects.jsonl"
    with FakeOpenAI() as fake:
        ann = Annotator(settings(fake.url, price_prompt=1.0, price_completion=2.0))
        ann.open_cache(tmp_path / "cache.jsonl")
        fake.get_failures = 1  # a status check fails once: retried, not fatal
        acc = BatchLabeler(ann, poll_interval=0).run(gs, out, rej)
        assert len(fake.batches) == 1 and fake.batches["batch-0"]["polls"] == 3  # polled until done
        (line,) = {json.loads(x)["url"] for x in fake.files["file-0"].decode().splitlines()}
        assert line == "/v1/chat/completions"
    assert acc.groups_done == 4 and acc.groups_rejected == 0 and acc.requests == 4
    assert acc.prompt_tokens == 400 and acc.estimated_cost == pytest.approx(0.5 * (400 + 2 * 80) / 1e6)
    assert sorted(read_jsonl(out), key=lambda r: r["id"]) == _online(tmp_path, gs)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("b.")) == [
        "b.jsonl",
        "b.rejects.jsonl",
    ]
    assert read_jsonl(rej) == []
    # the answers are cached: labeling the same groups again (new output) sends nothing
    with FakeOpenAI() as fake:
        ann = Annotator(settings(fake.url))
        ann.open_cache(tmp_path / "cache.jsonl")
        acc = BatchLabeler(ann, poll_interval=0).run(gs, tmp_path / "again.jsonl", rej)
        assert fake.batches == {} and fake.requests == []
    assert acc.groups_done == 4 and acc.cache_hits == 4


def test_batch_submitted_without_waiting_is_collected_not_resubmitted(tmp_path):
    gs = groups(3)
    out, rej = tmp_path / "o.jsonl", tmp_path / "r.jsonl"
    with FakeOpenAI() as fake:
        first = BatchLabeler(Annotator(settings(fake.url)), poll_interval=0, wait=False)
        acc = first.run(gs, out, rej)
        assert acc.groups_done == 0 and first.status == "in_progress"
        assert (tmp_path / "o.jsonl.batch.json").is_file() and not out.exists()
        acc = BatchLabeler(Annotator(settings(fake.url)), poll_interval=0).run(gs, out, rej)
        assert len(fake.batches) == 1  # the same batch, collected
    assert acc.groups_done == 3 and len(read_jsonl(out)) == 6
    assert not (tmp_path / "o.jsonl.batch.json").exists()


def test_failed_upload_leaves_no_request_file_and_no_batch_state(tmp_path):
    import openai

    out = tmp_path / "o.jsonl"
    with FakeOpenAI() as fake:
        fake.upload_fails = True
        with pytest.raises(openai.APIStatusError):
            BatchLabeler(Annotator(settings(fake.url)), poll_interval=0).run(
                groups(2), out, tmp_path / "r.jsonl"
            )
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("o.jsonl.")) == []


def test_batch_failures_are_rejected_and_only_they_are_sent_again(tmp_path):
    gs = groups(4)
    out, rej = tmp_path / "o.jsonl", tmp_path / "r.jsonl"
    with FakeOpenAI(script=["ok", "garbage", "ok", "500"]) as fake:
        ann = Annotator(settings(fake.url))
        acc = BatchLabeler(ann, poll_interval=0).run(gs, out, rej)
        assert acc.groups_done == 2 and acc.groups_rejected == 2 and acc.invalid_answers == 1
        reasons = sorted(r["reason"].split(":")[0] for r in read_jsonl(rej))
        assert reasons == ["batch request failed", "invalid answer"]
        acc = BatchLabeler(Annotator(settings(fake.url)), poll_interval=0).run(gs, out, rej)
        assert len(fake.batches) == 2 and fake.batches["batch-1"]["request_counts"]["total"] == 2
    assert acc.groups_done == 2 and acc.groups_skipped == 2
    assert sorted(read_jsonl(out), key=lambda r: r["id"]) == _online(tmp_path, gs)


def test_cli_batch_api(tmp_path, capsys):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(g) + "\n" for g in groups(2)))
    with FakeOpenAI() as fake:
        argv = [
            "annotate",
            "--input",
            str(inp),
            "--output",
            str(out),
            "--model",
            "fake",
            "--base-url",
            fake.url,
        ]
        assert main([*argv, "--batch-api", "--no-wait"]) == 0
        assert "run the same command again" in capsys.readouterr().err
        assert main([*argv, "--batch-api", "--batch-poll-interval", "0"]) == 0
        assert len(fake.batches) == 1
        assert main([*argv, "--no-wait"]) == 2
    assert "--no-wait needs --batch-api" in capsys.readouterr().err
    assert len(read_jsonl(out)) == 4


def test_two_shard_processes_together_label_what_one_run_labels(tmp_path):
    gs = groups(12)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(g) + "\n" for g in gs))
    with FakeOpenAI() as fake:
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pruner_model.cli",
                    "annotate",
                    "--input",
                    str(inp),
                    "--output",
                    str(tmp_path / f"shard{k}.jsonl"),
                    "--model",
                    "fake",
                    "--base-url",
                    fake.url,
                    "--shard",
                    f"{k}/2",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for k in range(2)
        ]
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], errors
    shards = [read_jsonl(tmp_path / f"shard{k}.jsonl") for k in range(2)]
    assert all(shards) and not {r["id"] for r in shards[0]} & {r["id"] for r in shards[1]}
    assert sorted(shards[0] + shards[1], key=lambda r: r["id"]) == _online(tmp_path, gs)
    assert (
        main(
            [
                "annotate",
                "--input",
                str(inp),
                "--output",
                str(tmp_path / "x.jsonl"),
                "--model",
                "m",
                "--shard",
                "2/2",
            ]
        )
        == 2
    )
