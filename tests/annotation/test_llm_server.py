"""End to end against a real OpenAI-compatible server: llama.cpp's, with SmolLM2-135M-Instruct.

The model is weak (about half right on sentence picking): these tests check the output contract,
resumability and accounting, never label quality.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pruner_model.annotation.llm import Annotator
from pruner_model.annotation.settings import AnnotatorSettings
from pruner_model.core.records import read_jsonl

from pruner_model import segment
from tests.llama import LlamaServer, free_port, llama_server

pytestmark = [pytest.mark.llm, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from llama_server(tmp_path_factory)


def squad_groups(n: int, passages: int = 2) -> list[dict]:
    """Groups from the public QA dev split when built, else small SQuAD-style groups."""
    path = Path("data/qa/dev.groups.jsonl")
    if path.is_file():
        out = []
        lines = [
            ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.startswith('{"id": "squad:')
        ]
        for line in lines[:n]:  # SQuAD questions: one answer sentence each
            g = json.loads(line)
            g["passages"] = [{**p, "text": p["text"][:450]} for p in g["passages"][:passages]]
            out.append(g)
        return out
    facts = [
        ("Paris", "France", "the Seine"),
        ("Berlin", "Germany", "the Spree"),
        ("Rome", "Italy", "the Tiber"),
        ("Vienna", "Austria", "the Danube"),
        ("Prague", "Czechia", "the Vltava"),
    ]
    out = []
    for i in range(n):
        city, country, river = facts[i % len(facts)]
        other = facts[(i + 1) % len(facts)]
        out.append(
            {
                "id": f"g{i}",
                "query": f"Which river flows through {city}? (question {i})",
                "passages": [
                    {
                        "id": "a",
                        "title": city,
                        "text": f"{city} is the capital of {country}. The city lies on {river}. "
                        f"It has many museums.",
                    },
                    {
                        "id": "b",
                        "title": other[0],
                        "text": f"{other[0]} is the capital of {other[1]}. Its river is {other[2]}.",
                    },
                ][:passages],
            }
        )
    return out


def settings(url: str, **kw) -> AnnotatorSettings:
    base = dict(
        model="smollm2",
        base_url=url,
        api_key="local",
        concurrency=2,
        timeout=60,
        max_retries=2,
        backoff_base=0.2,
        backoff_max=1.0,
        max_prompt_tokens=1200,
        max_tokens=160,
    )
    base.update(kw)
    return AnnotatorSettings(**base)


def test_annotate_squad_groups_through_real_server(server, tmp_path):
    groups = squad_groups(20)
    out = tmp_path / "llm.jsonl"
    ann = Annotator(settings(server.url))
    ann.open_cache(tmp_path / "cache.jsonl")
    acc = ann.run(groups, out, tmp_path / "rejects.jsonl")
    assert acc.groups_done + acc.groups_rejected == 20
    assert acc.groups_done >= 10  # a weak model, but structured output keeps most answers valid
    assert acc.prompt_tokens > 0 and acc.completion_tokens > 0
    assert acc.requests + acc.cache_hits >= acc.groups_done  # repeated groups are answered from the cache
    recs = read_jsonl(out)
    by_group = {}
    for r in recs:
        by_group.setdefault(r["id"].split("/", 1)[0], []).append(r)
        assert r["source"] == "llm:smollm2@v2"
        starts = {u.start: u.end for u in segment(r["context"])}
        for s, e in r["relevant_spans"]:  # whole sentences of the passage
            assert starts.get(s) == e
    assert all(len(v) == 2 for v in by_group.values()) and len(by_group) == acc.groups_done
    # a second run over the same output sends nothing
    ann2 = Annotator(settings(server.url))
    ann2.open_cache(tmp_path / "cache.jsonl")
    acc2 = ann2.run(groups, out, tmp_path / "rejects.jsonl")
    assert acc2.groups_skipped == acc.groups_done
    assert acc2.requests <= 3 * acc.groups_rejected * 3  # only the rejected groups are tried again


def _annotate_cli(url: str, groups: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pruner_model.cli",
            "annotate",
            "--input",
            str(groups),
            "--output",
            str(out),
            "--model",
            "smollm2",
            "--base-url",
            url,
            "--concurrency",
            "1",
            "--max-retries",
            "1",
            "--timeout",
            "120",  # a slow (loaded) machine must not turn answers into timeouts
            "--max-prompt-tokens",
            "1200",
            "--max-tokens",
            "160",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPENAI_API_KEY": "local"},
    )


def test_server_killed_mid_run_then_resumed(server, tmp_path):
    """`pruner annotate` against a server that dies mid-run stops with one line (exit 3) instead of
    rejecting every group; after a restart the same command labels each group exactly once."""
    groups = squad_groups(8)
    gpath = tmp_path / "groups.jsonl"
    gpath.write_text("".join(json.dumps(g) + "\n" for g in groups), encoding="utf-8")
    out, rej = tmp_path / "o.jsonl", tmp_path / "o.jsonl.rejects.jsonl"
    srv = LlamaServer(server.model, free_port(), tmp_path / "server.log").start()
    proc = _annotate_cli(srv.url, gpath, out)
    deadline = time.time() + 300
    while time.time() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 4):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    srv.stop()  # dies mid-run
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 3, err[-2000:]
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "unreachable" in lines[0] and "run the same command again" in lines[0]
    assert "Traceback" not in err
    first_ids = [r["id"] for r in read_jsonl(out)]
    first_groups = {i.split("/", 1)[0] for i in first_ids}
    assert len(first_groups) >= 2
    assert not rej.exists() or rej.read_text() == ""  # a dead server rejects nothing
    srv.start()  # back on the same port
    try:
        proc = _annotate_cli(srv.url, gpath, out)
        _, err = proc.communicate(timeout=600)
    finally:
        srv.stop()
    assert proc.returncode in (0, 1), err[-2000:]  # 1: the weak model's invalid answers were rejected
    stats = json.loads(out.with_name(out.name + ".stats.json").read_text())["accounting"]
    ids = [r["id"] for r in read_jsonl(out)]
    assert len(ids) == len(set(ids))  # every record exactly once
    done_groups = {i.split("/", 1)[0] for i in ids}
    assert stats["groups_skipped"] == len(first_groups)
    assert len(done_groups) == len(first_groups) + stats["groups_done"]
    assert len(done_groups) + stats["groups_rejected"] == len(groups)
    assert all(len([i for i in ids if i.startswith(g + "/")]) == 2 for g in done_groups)
