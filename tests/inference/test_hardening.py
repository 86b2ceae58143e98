"""Hardening through the public interfaces: a live `pruner serve` on 127.0.0.1 (bounded in count
and time), the CLI, and the Python API. Each test pins one way bad or hostile input must be handled."""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time

import httpx
import pytest
from pruner_model.core.records import writing_marker

from pruner_model.cli import main
from tests.fake_openai import FakeOpenAI
from tests.serving.test_reliability import Served

pytestmark = pytest.mark.slow
GOOD = {"query": "When was the tower built?", "passages": ["The tower was built in 1889. It is iron."]}
# patterns that backtrack catastrophically on these texts (31 characters the `regex`
# engine answers at once; 5000 are past any budget)
EXPLOSIVE = ("(a+)+$", "a" * 5000 + "b")


@pytest.fixture(scope="module")
def pruner(checkpoint):
    from pruner_model import ContextPruner

    return ContextPruner.from_pretrained(checkpoint)


@pytest.fixture(scope="module")
def server(checkpoint):
    srv = Served(
        checkpoint,
        "--max-request-tokens",
        "2000",
        "--header-timeout",
        "2",
        "--max-concurrency",
        "16",
        "--deadline",
        "20",
        env={"PRUNER_API_KEY": "k3y"},
    )
    yield srv
    log = srv.stop()
    assert "Traceback" not in log, log


AUTH = {"Authorization": "Bearer k3y"}


def post(server, body, path="/v1/prune", **kw):
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=30, **kw)


def health_latencies(server, n=7) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        r = httpx.get(server.url + "/health", timeout=10) if i % 2 else post(server, GOOD)
        assert r.status_code == 200, r.text
        out.append(time.perf_counter() - t)
    return out


# ---------------------------------------------------------------------------- 1. must_keep
def test_catastrophic_must_keep_pattern_is_stopped_in_python(pruner):
    t = time.perf_counter()
    r = pruner.prune("q?", ["a" * 30 + "b"], must_keep=["(a+)+$"])  # 200 s with the standard `re` engine
    assert r.stats.sentences_in == 1 and time.perf_counter() - t < 5
    pattern, text = EXPLOSIVE
    t = time.perf_counter()
    with pytest.raises(ValueError, match=r"ran over 1 s .*simplify it"):
        pruner.prune("q?", [text], must_keep=[pattern])
    assert time.perf_counter() - t < 5


def test_catastrophic_must_keep_pattern_is_a_422_and_the_server_keeps_serving(server):
    pattern, text = EXPLOSIVE
    answer: dict = {}

    def bad():
        answer["r"] = post(server, {"query": "q?", "passages": [text], "must_keep": [pattern]})

    t = threading.Thread(target=bad)
    t.start()
    lat = health_latencies(server, 5)  # while the pattern runs
    t.join(30)
    assert answer["r"].status_code == 422 and "simplify it" in answer["r"].text
    assert statistics.median(lat) < 1.0
    assert post(server, GOOD).status_code == 200


# ---------------------------------------------------------------------------- 2. slowloris
def test_idle_sockets_do_not_starve_clients_and_are_closed(server):
    socks = []
    try:
        for _ in range(64):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            s.sendall(b"POST /v1/prune HTTP/1.1\r\nHost: x\r\n")  # headers never finished
            socks.append(s)
        lat = health_latencies(server, 7)
        assert statistics.median(lat) < 1.0, lat
        time.sleep(3)  # past --header-timeout 2: the server has closed them
        closed = 0
        for s in socks:
            s.settimeout(2)
            try:
                closed += s.recv(1) == b""
            except (ConnectionResetError, TimeoutError):
                closed += 0
        assert closed == 64
    finally:
        for s in socks:
            s.close()


# ---------------------------------------------------------------------------- 8. over-cap bodies
def test_over_cap_bodies_are_refused_off_the_event_loop(server):
    body = {"query": "q?", "passages": ["Word is here. " * 2000] * 8}  # 224 kB, far over 2000 tokens
    stop = time.time() + 6
    codes: list[int] = []

    def flood():
        while time.time() < stop:
            codes.append(post(server, body).status_code)

    threads = [threading.Thread(target=flood) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    lat = health_latencies(server, 7)
    for t in threads:
        t.join(30)
    assert codes and set(codes) == {413}
    assert statistics.median(lat) < 1.0, lat


# ---------------------------------------------------------------------------- 19-22. HTTP shapes
@pytest.mark.parametrize(
    "extra, code",
    [
        ({"relative_floor": "none"}, 200),
        ({"uncertain_below": "none"}, 200),
        ({"token_budget": "5"}, 422),
        ({"dedup": "yes"}, 422),
        ({"neighbors": 1.5}, 422),
        ({"continuation": 0.3}, 200),
        ({"continuation": 1.5}, 422),
        ({"continuation": "x"}, 422),
    ],
)
def test_body_fields_are_as_strict_as_the_python_api(server, extra, code):
    r = post(server, {**GOOD, **extra})
    assert r.status_code == code, r.text


def test_rerank_query_limit_auth_scheme_and_plain_text_body(server):
    r = post(server, {"query": "q" * 2001, "documents": ["a."]}, path="/v1/rerank")
    assert r.status_code == 422 and "query over 2000 characters" in r.text
    r = httpx.post(server.url + "/v1/prune", json=GOOD, headers={"Authorization": "bearer k3y"}, timeout=30)
    assert r.status_code == 200
    r = httpx.post(server.url + "/v1/prune", json=GOOD, headers={"Authorization": "Bearer nope"}, timeout=30)
    assert r.status_code == 401
    r = httpx.post(
        server.url + "/v1/prune", content=b"hello", headers={**AUTH, "content-type": "text/plain"}, timeout=30
    )
    assert r.status_code == 422 and "must be a JSON object" in r.text


@pytest.mark.parametrize(
    "passage, message",
    [
        ({"id": "d\ud800", "text": "Some text."}, "passage 0 id is not valid Unicode"),
        ({"id": "d", "title": 5, "text": "Some text."}, "passage 0 title must be a string"),
        ({"id": ["x"], "text": "Some text."}, "passage 0 id must be a string or an integer"),
    ],
)
def test_passage_fields_have_one_validation_path(pruner, server, passage, message):
    with pytest.raises((ValueError, TypeError), match=message):
        pruner.prune("q?", [passage])
    raw = json.dumps({"query": "q?", "passages": [passage]})  # the surrogate as a JSON escape
    r = httpx.post(
        server.url + "/v1/prune",
        content=raw,
        headers={**AUTH, "content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 422, r.text


# ---------------------------------------------------------------------------- 3, 7, 10, 12: prune --input
def write_groups(path, groups):
    path.write_text("".join(json.dumps(g) + "\n" for g in groups))
    return path


def groups(n=4):
    return [
        {"id": f"g{i}", "query": f"When was tower {i} built?", "passages": [f"Tower {i} is old."]}
        for i in range(n)
    ]


def test_resume_never_cuts_a_file_it_did_not_write(checkpoint, tmp_path, capsys):
    src = write_groups(tmp_path / "g.jsonl", groups())
    notes = tmp_path / "notes.txt"
    notes.write_text("a\nmy last line")
    base = ["prune", "--model", str(checkpoint), "--input", str(src)]
    assert main([*base, "--output", str(notes)]) == 2
    assert notes.read_text() == "a\nmy last line"
    assert "not touched" in capsys.readouterr().err
    before = src.read_text()
    assert main([*base, "--output", str(src)]) == 2
    assert src.read_text() == before and "is the input file" in capsys.readouterr().err
    other = tmp_path / "records.jsonl"  # a JSONL of someone else's with a whole last line: refused
    other.write_text('{"x": 1}\nnot json\n')
    assert main([*base, "--output", str(other)]) == 2 and other.read_text() == '{"x": 1}\nnot json\n'
    out = tmp_path / "out.jsonl"
    assert main([*base, "--output", str(out)]) == 0 and not writing_marker(out).exists()


@pytest.mark.parametrize(
    "ids, lines",
    [
        (["d", "d"], "line 1 and line 2"),
        ([7, "7"], "line 1 and line 2"),
        (["a", "b", "a"], "line 1 and line 3"),
    ],
)
def test_duplicate_ids_are_refused_up_front(checkpoint, tmp_path, capsys, ids, lines):
    src = write_groups(tmp_path / "g.jsonl", [{**g, "id": i} for g, i in zip(groups(len(ids)), ids)])
    out = tmp_path / "o.jsonl"
    assert main(["prune", "--model", str(checkpoint), "--input", str(src), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"({lines})" in err and "ids must be unique" in err and not out.exists()


def test_one_bad_group_is_named_and_the_groups_before_it_are_written(checkpoint, tmp_path, capsys):
    gs = groups(5)
    gs[3]["passages"] = [{"id": "p\ud800", "text": "Bad id."}]
    src = write_groups(tmp_path / "g.jsonl", gs)
    out = tmp_path / "o.jsonl"
    argv = [
        "prune",
        "--model",
        str(checkpoint),
        "--input",
        str(src),
        "--output",
        str(out),
        "--batch-size",
        "8",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{src}:4: group 'g3'" in err and "not valid Unicode" in err and "Traceback" not in err
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == ["g0", "g1", "g2"]
    gs[3]["id"] = {"nested": 1}
    write_groups(src, gs)
    assert main(argv) == 2 and f"{src}:4: id must be a string or an integer" in capsys.readouterr().err


def test_prune_output_folder_is_a_clear_error(checkpoint, tmp_path, capsys):
    p = tmp_path / "p.json"
    p.write_text(json.dumps(["Some text."]))
    argv = [
        "prune",
        "--model",
        str(checkpoint),
        "--query",
        "q?",
        "--passages",
        str(p),
        "--output",
        str(tmp_path),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "is a folder" in err and ".tmp" not in err


# ---------------------------------------------------------------------------- 5. long words
def test_one_long_word_cannot_fool_the_budget_or_the_token_counts(pruner):
    r = pruner.prune("What is the token?", ["The API token is below.\n\n" + "QUJD" * 25_000], token_budget=50)
    assert r.stats.tokens_in >= 25_000  # 100,000 characters count as ~25,000 tokens, not one [UNK]
    assert r.stats.tokens_out <= 50 and len(r.text) < 1_000


# ---------------------------------------------------------------------------- 4. export
def test_export_replaces_the_whole_folder(tmp_path, _tiny_bert, bert_tokenizer):
    from pruner_model.export.onnx import ExportError, export_onnx

    a = tmp_path / "a"
    _tiny_bert.save_pretrained(a)
    bert_tokenizer.save_pretrained(a)
    out = tmp_path / "onnx"
    export_onnx(a, out, quantize="int8", validate=False)
    assert (out / "model.int8.onnx").is_file()
    export_onnx(a, out, validate=False)  # no int8 this time: none of the earlier one survives
    assert not (out / "model.int8.onnx").exists() and (out / "model.onnx").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ExportError, match="not an ONNX export folder"):
        export_onnx(a, mine, validate=False)
    assert (mine / "notes.txt").read_text() == "keep me"


# ---------------------------------------------------------------------------- 14. write-threshold
def test_write_threshold_writes_the_target_and_the_int8_threshold(tmp_path, _tiny_bert, bert_tokenizer):
    from pruner_model.export.onnx import export_onnx

    ckpt = tmp_path / "c"
    _tiny_bert.save_pretrained(ckpt)
    bert_tokenizer.save_pretrained(ckpt)
    data = tmp_path / "d.jsonl"
    ctx = "Paris is the capital of France. It lies on the Seine. Bananas are yellow."
    data.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"q{i}/a",
                    "query": f"Where is Paris {i}?",
                    "context": ctx,
                    "relevant_spans": [[0, 31]],
                }
            )
            + "\n"
            for i in range(6)
        )
    )
    base = [
        "evaluate",
        "--data",
        str(data),
        "--baselines",
        "none",
        "--write-threshold",
        "--target-evidence",
        "0.8",
    ]
    assert main([*base, "--model", str(ckpt), "--output", str(tmp_path / "r1")]) == 0
    cfg = json.loads((ckpt / "config.json").read_text())
    assert cfg["target_evidence"] == 0.8
    onnx = tmp_path / "o"
    export_onnx(ckpt, onnx, quantize="int8", validate=False)
    before = json.loads((onnx / "config.json").read_text())["threshold"]
    assert main([*base, "--model", str(onnx), "--quantized", "--output", str(tmp_path / "r2")]) == 0
    cfg = json.loads((onnx / "config.json").read_text())
    assert cfg["threshold"] == before and cfg["int8_threshold"] is not None


def test_write_operating_point_names_the_recommended_threshold(tmp_path, _tiny_bert, bert_tokenizer, capsys):
    from pruner_model import ContextPruner

    ckpt = tmp_path / "c"
    _tiny_bert.save_pretrained(ckpt)
    bert_tokenizer.save_pretrained(ckpt)
    data = tmp_path / "d.jsonl"
    ctx = "Paris is the capital of France. It lies on the Seine. Bananas are yellow."
    rows = [
        {"id": f"q{i}/a", "query": f"Where is Paris {i}?", "context": ctx, "relevant_spans": [[0, 31]]}
        for i in range(6)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = [
        "evaluate",
        "--model",
        str(ckpt),
        "--data",
        str(data),
        "--baselines",
        "none",
        "--target-evidence",
        "0.8",
    ]
    before = json.loads((ckpt / "config.json").read_text())
    # a bad combination is one line and leaves the folder as it was
    assert (
        main([*base, "--output", str(tmp_path / "r0"), "--write-operating-point", "x", "--write-threshold"])
        == 2
    )
    assert "not with --write-threshold" in capsys.readouterr().err
    assert json.loads((ckpt / "config.json").read_text()) == before
    assert main([*base, "--output", str(tmp_path / "r1"), "--write-operating-point", "tickets"]) == 0
    recommended = json.loads((tmp_path / "r1" / "report.json").read_text())["recommended_threshold"]
    cfg = json.loads((ckpt / "config.json").read_text())
    point = cfg["operating_points"]["tickets"]  # measured on the checkpoint's floor
    assert point == {"threshold": pytest.approx(recommended), "relative_floor": before.get("relative_floor")}
    assert cfg["threshold"] == before["threshold"]  # the checkpoint's own threshold stays
    pruner = ContextPruner.from_pretrained(ckpt)
    kept = pruner.prune("Where is Paris 1?", [ctx], operating_point="tickets")
    assert kept.threshold == pytest.approx(recommended)


# ---------------------------------------------------------------------------- 15, 22. model folders
@pytest.mark.parametrize(
    "change, message",
    [
        ({"max_length": 100000}, "max_length 100000 is over the encoder's 512 positions"),
        ({"threshold": "high"}, "threshold in the checkpoint's config must be a number"),
    ],
)
def test_inconsistent_model_folders_are_refused_at_load(
    tmp_path, _tiny_bert, bert_tokenizer, capsys, change, message
):
    ckpt = tmp_path / "c"
    _tiny_bert.save_pretrained(ckpt)
    bert_tokenizer.save_pretrained(ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.update(change)
    (ckpt / "config.json").write_text(json.dumps(cfg))
    p = tmp_path / "p.json"
    p.write_text(json.dumps(["Some text."]))
    assert main(["prune", "--model", str(ckpt), "--query", "q?", "--passages", str(p)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path, bert_tokenizer):
    from pruner_model import ContextPruner, PrunerModel
    from tests.conftest import tiny_config

    small = tiny_config("bert")
    small.encoder_config.vocab_size = 1000
    ckpt = tmp_path / "c"
    PrunerModel(small).save_pretrained(ckpt)
    bert_tokenizer.save_pretrained(ckpt)
    with pytest.raises(ValueError, match="tokenizer has 30522 tokens, the encoder's embedding table 1000"):
        ContextPruner.from_pretrained(ckpt)


# ---------------------------------------------------------------------------- 16, 18. segmentation
def test_long_paragraphs_are_cut_in_windows_with_the_same_sentences(monkeypatch):
    import random

    from pruner_model.core import segmentation
    from pruner_model.core.segmentation import segment

    rng = random.Random(0)
    words = "the of Dr. Smith U.S. went to a store and bought 3.5 kg apples . ! ? e.g. it".split()
    text = " ".join(rng.choice(words) for _ in range(8000))
    windowed = [(u.start, u.end) for u in segment(text)]
    monkeypatch.setattr(segmentation, "PROSE_CHUNK_CHARS", 10**9)
    assert windowed == [(u.start, u.end) for u in segment(text)]

    class Slow:
        def span_tokenize(self, text):
            raise TimeoutError("nltk regex timed out")

    monkeypatch.setattr(segmentation, "_punkt", lambda language: Slow())
    with pytest.raises(ValueError, match="sentence splitting timed out"):
        segment("Ab cd. " * 10)


# ---------------------------------------------------------------------------- 13. answer parser
def test_answer_parser_is_linear():
    from pruner_model.annotation.prompt import InvalidAnswer, parse_answer

    t = time.perf_counter()
    for content in ("{" * 300_000, "x" + '{"a":' * 100_000 + "1" + "}" * 100_000):
        with pytest.raises(InvalidAnswer):
            parse_answer(content, [])
    assert time.perf_counter() - t < 2


# ---------------------------------------------------------------------------- 6, 7, 11, 22: annotate
def raw_groups(path, gs):
    path.write_text("".join(json.dumps(g) + "\n" for g in gs))
    return path


def test_the_key_comes_only_from_the_variable_named(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-default")
    monkeypatch.delenv("MY_KEY", raising=False)
    src = raw_groups(
        tmp_path / "g.jsonl", [{"id": "g", "query": "q?", "passages": [{"id": "a", "text": "A. B."}]}]
    )
    with FakeOpenAI() as fake:
        argv = ["annotate", "--input", str(src), "--output", str(tmp_path / "o.jsonl"), "--model", "m"]
        assert main([*argv, "--base-url", fake.url, "--api-key-env", "MY_KEY"]) == 0
        assert fake.authorizations and not any("sk-secret" in (a or "") for a in fake.authorizations)
        monkeypatch.setenv("MY_KEY", "sk-mine")
        assert (
            main(
                [
                    *argv,
                    "--output",
                    str(tmp_path / "o2.jsonl"),
                    "--base-url",
                    fake.url,
                    "--api-key-env",
                    "MY_KEY",
                ]
            )
            == 0
        )
        assert fake.authorizations[-1] == "Bearer sk-mine"


@pytest.mark.parametrize(
    "gs, message",
    [
        (
            [{"id": "d", "query": "q?", "passages": [{"text": "A."}]}] * 2,
            "id 'd' appears twice (line 1 and line 2)",
        ),
        (
            [
                {"id": 7, "query": "q?", "passages": [{"text": "A."}]},
                {"id": "7", "query": "q?", "passages": [{"text": "B."}]},
            ],
            "id '7' appears twice",
        ),
        (
            [{"id": "d", "query": "q?", "passages": [{"text": "A.", "title": [1]}]}],
            ":1: passage 0 title must be a string",
        ),
    ],
)
def test_annotate_refuses_bad_ids_and_titles_up_front(tmp_path, capsys, gs, message):
    src = raw_groups(tmp_path / "g.jsonl", gs)
    out = tmp_path / "o.jsonl"
    assert (
        main(
            [
                "annotate",
                "--input",
                str(src),
                "--output",
                str(out),
                "--model",
                "m",
                "--base-url",
                "http://127.0.0.1:9",
            ]
        )
        == 2
    )
    assert message in capsys.readouterr().err and not out.exists()


def test_annotate_refuses_its_input_as_output(tmp_path, capsys):
    src = raw_groups(tmp_path / "g.jsonl", [{"id": "d", "query": "q?", "passages": [{"text": "A."}]}])
    before = src.read_text()
    with FakeOpenAI() as fake:
        assert (
            main(
                [
                    "annotate",
                    "--input",
                    str(src),
                    "--output",
                    str(src),
                    "--model",
                    "m",
                    "--base-url",
                    fake.url,
                ]
            )
            == 2
        )
    assert "is the input file" in capsys.readouterr().err and src.read_text() == before


def test_negative_usage_is_not_added():
    from pruner_model.core.records import usage_count

    assert [usage_count(v) for v in (5, -3, None, "7", "x", True, float("nan"))] == [5, 0, 0, 7, 0, 0, 0]


# ---------------------------------------------------------------------------- 9, 17: training
def test_an_uncalibrated_checkpoint_promises_nothing(tmp_path, tiny_model, bert_tokenizer):
    from pruner_model.training.trainer import train

    from tests.training.helpers import tiny_cfg, write_data_files

    cfg = tiny_cfg(write_data_files(tmp_path), **{"data.calibration_dev_groups": 0, "train.eval_every": 0})
    metrics = train(cfg, tmp_path / "run", model=tiny_model, tokenizer=bert_tokenizer, quiet=True)
    card = (tmp_path / "run" / "README.md").read_text()
    assert "not calibrated" in card and "Calibrated threshold" not in card and "promise **" not in card
    assert "calibration" not in metrics and "promise" not in metrics.get("dev", {})


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.report_dev_groups=-1", "data.report_dev_groups must be >= 0"),
        ("calibration.shifts=[5]", "calibration.shifts: each must be a slice name"),
        ("train.threads=-3", "train.threads must be >= 1"),
    ],
)
def test_training_config_gaps(override, message):
    from pruner_model.training.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])
