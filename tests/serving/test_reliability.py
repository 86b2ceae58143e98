"""Hardening, through the public interfaces: a real `pruner serve` process over HTTP, the CLI for
training and data, a scripted local OpenAI-compatible endpoint for annotation."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from pruner_model.cli import main

pytestmark = pytest.mark.slow
GOOD = {
    "query": "When was the tower built?",
    "passages": ["The tower was built in 1889. It is iron.", "Bananas."],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    def __init__(self, model: Path, *extra: str, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pruner_model.cli",
                "serve",
                "--model",
                str(model),
                "--port",
                str(self.port),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        deadline = time.time() + 90
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.communicate()[1])
            try:
                httpx.get(self.url + "/health", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("server did not start")

    def stop(self) -> str:
        self.proc.terminate()
        return self.proc.communicate(timeout=30)[1]


@pytest.fixture(scope="module")
def server(checkpoint):
    srv = Served(checkpoint, "--max-request-tokens", "2000", "--max-wait-ms", "50")
    yield srv
    log = srv.stop()
    assert "Traceback" not in log, log  # no request ever crashed the server


def test_a_bad_request_never_fails_the_good_ones_in_its_batch(server):
    bad = b'{"query": "q?", "passages": ["bad \\ud800 x."]}'
    for _ in range(3):
        results: dict[int, httpx.Response] = {}

        def send(i, results=results):
            if i == 5:
                r = httpx.post(
                    server.url + "/v1/prune",
                    content=bad,
                    headers={"content-type": "application/json"},
                    timeout=60,
                )
            else:
                r = httpx.post(server.url + "/v1/prune", json={**GOOD, "query": f"question {i}?"}, timeout=60)
            results[i] = r

        threads = [threading.Thread(target=send, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results[5].status_code == 422 and "passage 0 is not valid Unicode" in results[5].text
        for i, r in results.items():
            if i != 5:
                assert r.status_code == 200, (i, r.text)
                assert r.json()["query"] == f"question {i}?"


@pytest.mark.parametrize(
    "raw, field",
    [
        (b'{"query": "q?", "passages": ["a."], "threshold": NaN}', "threshold"),
        (b'{"query": "q?", "passages": ["a."], "token_budget": Infinity}', "token_budget"),
        (b'{"query": "bad \\udc00", "passages": ["a."]}', "query"),
        (b'{"query": "q?", "passages": ["a."], "neighbors": 1000000000}', "neighbors"),
        (b'{"query": "q?", "passages": ["a."], "min_relevance": 2}', "min_relevance"),
        (b'{"query": "q?", "passages": ["a."], "threshold": "\\ud800"}', "threshold"),
    ],
)
def test_impossible_values_are_a_422_naming_the_field(server, raw, field):
    r = httpx.post(
        server.url + "/v1/prune", content=raw, headers={"content-type": "application/json"}, timeout=30
    )
    assert r.status_code == 422, r.text
    assert field in r.text


def test_compute_cap_is_a_413_with_the_limit(server):
    body = {"query": "q?", "passages": ["word " * 900, "word " * 900, "word " * 900]}
    r = httpx.post(server.url + "/v1/prune", json=body, timeout=30)
    assert r.status_code == 413 and "over the limit of 2000" in r.text
    assert httpx.post(server.url + "/v1/prune", json=GOOD, timeout=30).status_code == 200


def test_slow_client_is_timed_out_and_others_are_served(checkpoint):
    srv = Served(checkpoint, "--deadline", "20")
    try:
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(
                b'POST /v1/prune HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{"query"'
            )
            t0 = time.time()
            # meanwhile a normal client is served
            assert httpx.post(srv.url + "/v1/prune", json=GOOD, timeout=30).status_code == 200
            s.settimeout(30)
            answer = s.recv(4096).decode()
            assert answer.startswith("HTTP/1.1 408") and time.time() - t0 < 25
    finally:
        srv.stop()


def test_deadline_is_a_504(checkpoint):
    srv = Served(checkpoint, "--deadline", "0.000001")
    try:
        r = httpx.post(srv.url + "/v1/prune", json=GOOD, timeout=30)
        assert r.status_code == 504 and "deadline" in r.text
    finally:
        srv.stop()


def test_api_key_is_required_when_set_and_never_logged(checkpoint):
    key = "sk-test-0123456789"
    srv = Served(checkpoint, env={"PRUNER_API_KEY": key})
    try:
        assert httpx.post(srv.url + "/v1/prune", json=GOOD, timeout=30).status_code == 401
        wrong = {"authorization": "Bearer nope"}
        assert httpx.post(srv.url + "/v1/prune", json=GOOD, headers=wrong, timeout=30).status_code == 401
        ok = {"authorization": f"Bearer {key}"}
        assert httpx.post(srv.url + "/v1/prune", json=GOOD, headers=ok, timeout=30).status_code == 200
        assert httpx.get(srv.url + "/health", timeout=30).status_code == 200
    finally:
        log = srv.stop()
    assert key not in log and "API key required" in log


def test_a_broken_model_fails_at_start_with_one_line(checkpoint, tmp_path, capsys):
    import torch
    from safetensors.torch import load_file, save_file

    nan_model = tmp_path / "nan"
    nan_model.mkdir()
    for f in checkpoint.iterdir():
        (nan_model / f.name).write_bytes(f.read_bytes())
    weights = load_file(str(nan_model / "model.safetensors"))
    weights["token_head.weight"] = torch.full_like(weights["token_head.weight"], float("nan"))
    save_file(weights, str(nan_model / "model.safetensors"))
    assert main(["serve", "--model", str(nan_model), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "self-check failed" in err[0] and "non-finite" in err[0]

    import onnx
    from onnx import TensorProto, helper

    wrong = tmp_path / "wrong-onnx"
    wrong.mkdir()
    for f in checkpoint.iterdir():
        if f.name != "model.safetensors":
            (wrong / f.name).write_bytes(f.read_bytes())
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT64, ["b", "s"])
        for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    out = helper.make_tensor_value_info("token_logits", TensorProto.FLOAT, ["b", "s"])
    node = helper.make_node("Cast", ["input_ids"], ["token_logits"], to=TensorProto.FLOAT)
    graph = helper.make_graph([node], "wrong", inputs, [out])
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(wrong / "model.onnx")
    )
    assert main(["serve", "--model", str(wrong), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "self-check failed" in err[0]


def test_serve_rejects_an_impossible_port_with_one_line(checkpoint, capsys):
    assert main(["serve", "--model", str(checkpoint), "--port", "99999"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --port must be in 1-65535, got 99999"]


def test_prune_cli_bounds_and_progress(checkpoint, tmp_path, capsys):
    passages = tmp_path / "p.json"
    passages.write_text(json.dumps(["A sentence. Another one."]))
    base = ["prune", "--model", str(checkpoint), "--query", "q?", "--passages", str(passages)]
    assert main([*base, "--neighbors", "1000000000"]) == 2
    assert "neighbors must be in [0, 64]" in capsys.readouterr().err
    assert main([*base, "--token-budget", "-1"]) == 2
    assert "token_budget must be >= 0" in capsys.readouterr().err
    long = tmp_path / "long.txt"
    long.write_text(" ".join(f"Sentence {i} is about topic {i}." for i in range(6000)))
    assert main(["prune", "--model", str(checkpoint), "--query", "q?", "--passages", str(long)]) == 0
    assert "scoring" in capsys.readouterr().err  # a progress bar over the windows


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lr=.nan", "train.lr must be a finite number"),
        ("train.max_grad_norm=-1", "train.max_grad_norm and train.weight_decay must be >= 0"),
        ("train.max_steps=-5", "train.max_steps must be >= 1"),
        ("train.best_metric=compresion_at_target", "train.best_metric must be one of"),
        ("calibration.margin=.inf", "calibration.margin must be >= 0"),
    ],
)
def test_training_config_is_validated_up_front(tmp_path, capsys, override, message):
    out = tmp_path / "run"
    assert main(["train", "--output", str(out), "--set", override]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


def test_max_length_over_the_backbone_is_refused(tmp_path, capsys):
    assert (
        main(
            [
                "train",
                "--output",
                str(tmp_path / "r"),
                "--set",
                "model.max_length=1024",
                "--set",
                "model.stride=64",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "model.max_length 1024 is over the backbone's 512 positions" in err


def test_a_diverging_run_stops_naming_the_step_and_publishes_nothing(tmp_path, tiny_model, bert_tokenizer):
    from pruner_model.training.trainer import TrainingDiverged, train

    from tests.training.helpers import make_records, tiny_cfg

    data_files = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    for f in data_files:
        f.write_text("".join(json.dumps(r) + "\n" for r in make_records()))
    cfg = tiny_cfg(
        data_files,
        **{"train.max_steps": 6, "train.lr": 1e30, "train.head_lr": 1e30, "train.max_grad_norm": 0},
    )
    with pytest.raises(TrainingDiverged, match=r"at step \d+"):
        train(cfg, tmp_path / "run", model=tiny_model, tokenizer=bert_tokenizer, quiet=True)
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_data_file_names_cannot_escape_the_output(tmp_path, capsys):
    squad = tmp_path / "s.json"
    squad.write_text(json.dumps({"data": []}))
    out = tmp_path / "out"
    assert (
        main(
            [
                "data",
                "squad",
                "--output",
                str(out),
                "--file",
                f"{squad}:../../x",
            ]
        )
        == 2
    )
    assert "split name '../../x'" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists() and not out.exists()


@pytest.mark.parametrize("retry_after", ["-1", "nan", "inf", "soon"])
def test_bad_retry_after_never_aborts_annotation(tmp_path, retry_after):
    from pruner_model.annotation.llm import Annotator

    from tests.annotation.test_annotation import groups, settings
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI(script=["429", "429"], retry_after=retry_after) as fake:
        acc = Annotator(settings(fake.url, concurrency=1)).run(
            groups(2), tmp_path / "o.jsonl", tmp_path / "r.jsonl"
        )
    assert acc.groups_done == 2 and acc.retries == 2
