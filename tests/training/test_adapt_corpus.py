"""`pruner adapt --corpus`: from a folder of documents to an adapted checkpoint.

Without an LLM: a query log goes through chunking, questions and mining, and labeled records put
where the labels step writes them go on through split, training, calibration and the report.
Against llama.cpp's server with SmolLM2 (a real OpenAI-compatible endpoint): every corpus step
runs and a killed run resumes without asking a chunk twice; a dead endpoint stops the command
with one line and marks nothing done. SmolLM2 writes poor questions and labels: these tests check the
contracts, never the quality.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pruner_model.core.records import read_jsonl, validate_labeled

from pruner_model.cli import main as cli_main
from tests.llama import free_port, llama_server
from tests.training.helpers import write_labels_step

CORPUS = Path(__file__).parent.parent / "fixtures" / "corpus"
TRAIN_FAST = [
    "--epochs", "1", "--dtype", "fp32", "--replay", "--set", "train.max_steps=2", "--set", "train.batch_size=4",
    "--set", "train.mixed_precision=no", "--set", "model.relevance_distill_weight=0",
]  # fmt: skip


def test_a_query_log_is_mined_into_groups_and_the_labels_go_on_to_an_adapted_checkpoint(
    tmp_path, tiny_checkpoint, capsys
):
    log = tmp_path / "queries.jsonl"
    log.write_text("".join(json.dumps({"query": q}) + "\n" for q in [
        "how long does sourdough ferment", "when was the karrow lighthouse automated",
        "how fast does the varn glacier move", "what does the waggle dance show",
    ]))  # fmt: skip
    out = tmp_path / "mine"
    argv = ["adapt", "--corpus", str(CORPUS), "--queries", str(log), "--model", str(tiny_checkpoint),
            "--output", str(out), "--chunk-words", "40", "--passages", "3", *TRAIN_FAST]  # fmt: skip
    assert cli_main([*argv, "--until", "groups"]) == 0
    assert "stopped: after groups" in capsys.readouterr().err
    chunks = {c["id"]: c for c in read_jsonl(out / "data" / "chunks.jsonl")}
    groups = read_jsonl(out / "data" / "groups.jsonl")
    assert [g["query"] for g in groups] == [
        json.loads(line)["query"] for line in log.read_text().splitlines()
    ]
    for g in groups:
        assert len(g["passages"]) == 3 and all(p["id"] in chunks for p in g["passages"])
        assert g["meta"]["kind"] == "logged" and g["meta"]["chunk"] is None  # a logged query has no own chunk
        assert not g["meta"]["answerless"]  # and no document to leave out
    glacier = next(g for g in groups if "glacier" in g["query"])
    assert any(p["id"].startswith("glaciers.txt#") for p in glacier["passages"])  # mined, not random

    write_labels_step(out)  # the labels step's output, as an endpoint would have written it
    assert cli_main(argv) == 0
    state = json.loads((out / "adapt.json").read_text())
    assert sum(c["documents"] for c in state["split"].values()) == 20  # split by meta.document
    assert (out / "model" / "model.safetensors").is_file()
    report = (out / "report.md").read_text()
    assert "Corpus: 8 documents" in report and "4 logged queries" in report and "40 confirmed" in report


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from llama_server(tmp_path_factory)


def _argv(out: Path, url: str, checkpoint: Path, questions: int = 4) -> list[str]:
    return ["adapt", "--corpus", str(CORPUS), "--model", str(checkpoint), "--output", str(out),
            "--llm-model", "smollm2", "--base-url", url, "--api-key-env", "NO_SUCH_KEY", "--chunk-words", "40",
            "--questions", str(questions), "--questions-per-chunk", "2", "--passages", "2", "--concurrency", "1",
            "--max-retries", "1", "--max-connection-failures", "1", "--timeout", "120", "--until", "labels"]  # fmt: skip


def test_an_endpoint_that_is_down_stops_the_command_in_one_line_and_nothing_is_marked_done(
    tmp_path, checkpoint, capsys
):
    out = tmp_path / "mine"
    dead = f"http://127.0.0.1:{free_port()}/v1"
    argv = _argv(out, dead, checkpoint)
    few = [
        *argv[: argv.index("--max-connection-failures")],
        *argv[argv.index("--max-connection-failures") + 2 :],
    ]
    assert cli_main(few) == 2  # fewer chunks than failures in a row: each rejected, none written
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .startswith("error: no chunk got questions (2 rejected")
    )
    llm_as_model = [*few[: few.index("--model") + 1], "gpt-4o-mini", *few[few.index("--model") + 2 :]]
    assert cli_main(llm_as_model) == 2  # the LLM given where the checkpoint goes: said in one line
    assert "--llm-model the LLM" in capsys.readouterr().err
    assert cli_main(argv) == 3  # the endpoint is down after one failure
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "unreachable" in err[-1] and "Traceback" not in "\n".join(err)
    state = json.loads((out / "adapt.json").read_text())
    assert set(state["corpus"]) == {"chunks"}  # the chunks stay; questions were not marked done
    raw = out / "data" / "questions.raw.jsonl"
    assert not raw.is_file() or not raw.read_text().strip()


@pytest.mark.llm
@pytest.mark.slow
def test_every_corpus_step_runs_against_a_real_endpoint_and_resumes_after_a_kill(
    server, tmp_path, checkpoint, capsys
):
    out = tmp_path / "mine"
    raw = out / "data" / "questions.raw.jsonl"
    argv = _argv(out, server.url, checkpoint, questions=8)  # 4 chunks
    # a run killed once its first chunk's questions are written...
    cmd = [sys.executable, "-m", "pruner_model.cli", *argv]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not (raw.is_file() and raw.read_text().strip()):
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    written = {r["chunk"] for r in read_jsonl(raw, skip_errors=True)}
    assert written

    # ...resumes: the chunks done are not asked again, then groups and labels follow
    code = cli_main(argv)
    err = capsys.readouterr().err
    state = json.loads((out / "adapt.json").read_text())
    questions = state["corpus"]["questions"]
    assert questions["accounting"]["groups_skipped"] >= len(written)
    chunks_done = [r["chunk"] for r in read_jsonl(raw)]
    assert (
        len(chunks_done) == len(set(chunks_done)) == questions["chunks asked"] - questions["chunks rejected"]
    )
    groups = read_jsonl(out / "data" / "groups.jsonl")
    assert groups and all(g["query"] for g in groups)
    if code != 0:  # SmolLM2 may answer every labeling request out of range on some CPU: said in one line
        assert code == 2 and err.strip().splitlines()[-1].startswith("error: no group was labeled")
        assert "labels" not in state["corpus"]  # not marked done: the same command asks again
        return
    labels = state["corpus"]["labels"]
    outcomes = ("confirmed", "not answered by its chunk", "kept as labeled", "groups rejected")
    assert sum(labels[k] for k in outcomes) == len(groups)
    assert labels["accounting"]["requests"] >= 1 and labels["accounting"]["prompt_tokens"] > 0
    kept = read_jsonl(out / "data" / "labeled.jsonl")
    for i, r in enumerate(kept):
        validate_labeled(r, f"labeled.jsonl:{i + 1}")
        assert r["meta"]["document"] and r["source"].startswith("llm:smollm2@")
