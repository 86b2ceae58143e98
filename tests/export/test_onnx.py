import json

import numpy as np
import pytest
from pruner_model.export.onnx import export_onnx
from pruner_model.inference import ContextPruner

from pruner_model.cli import main
from tests.conftest import read_threshold

pytestmark = pytest.mark.slow

PASSAGES = [
    "Paris is the capital of France. The Eiffel Tower was built in 1889. It is made of iron.",
    {
        "id": "b",
        "text": "Berlin is the capital of Germany. It lies on the Spree.\n\nThe Spree flows into the Havel.",
    },
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory, _tiny_bert, bert_tokenizer):
    base = tmp_path_factory.mktemp("onnx")
    ckpt = base / "ckpt"
    _tiny_bert.save_pretrained(ckpt)
    bert_tokenizer.save_pretrained(ckpt)
    out = base / "export"
    report = export_onnx(ckpt, out, quantize="int8")
    return ckpt, out, report


def test_export_writes_folder_and_validates(exported):
    _, out, report = exported
    for name in ("model.onnx", "model.int8.onnx", "config.json", "tokenizer.json", "export_report.json"):
        assert (out / name).is_file(), name
    assert not (out / "model.safetensors").exists()
    assert report["fp32_ok"] and report["fp32_max_abs_diff"] <= 1e-4
    # the BERT graph gets onnxruntime's transformer fusions before int8 quantization
    assert report["fused"] and report["fused_operators"]["Attention"] == 2
    assert report["int8_ok"] and report["int8_agreement"] >= 0.98
    saved = json.loads((out / "export_report.json").read_text())
    assert saved["inputs"] == ["input_ids", "token_type_ids", "attention_mask"]


def test_int8_weights_have_one_scale_per_output_channel(exported):
    import onnx
    from onnx import numpy_helper

    _, out, report = exported
    graph = onnx.load(str(out / "model.int8.onnx")).graph
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    matmul_weights = [
        n.input[1] for n in graph.node if n.op_type == "MatMulInteger" and n.input[1] in weights
    ]
    assert matmul_weights, "no int8 MatMul in the graph"
    for name in matmul_weights:  # per-tensor quantization would give a scalar scale
        scale = weights[name[: -len("_quantized")] + "_scale"]
        assert scale.shape == (weights[name].shape[1],), (name, scale.shape)
    assert report["int8_per_channel"] is True
    assert report["int8_scheme"] == "fp32 projections"  # no dev data to smooth on


def test_failed_int8_check_keeps_only_the_valid_fp32_export(exported, tmp_path, monkeypatch):
    import pruner_model.export.onnx as ox
    import pruner_model.export.validate as validation

    ckpt, _, _ = exported
    monkeypatch.setattr(validation, "INT8_MIN_AGREEMENT", 1.01)  # no int8 model can pass
    out = tmp_path / "export"
    with pytest.raises(ox.ExportError, match="int8 file not kept"):
        export_onnx(ckpt, out, quantize="int8")
    assert (out / "model.onnx").is_file() and not (out / "model.int8.onnx").exists()
    report = json.loads((out / "export_report.json").read_text())
    assert report["files"] == ["model.onnx"] and report["fp32_ok"] and not report["int8_ok"]
    assert not list(out.glob("*.tmp"))
    assert ContextPruner.from_pretrained(out).backend.name == "onnx"


def test_onnx_backend_matches_torch(exported):
    ckpt, out, _ = exported
    torch_p = ContextPruner.from_pretrained(ckpt, dtype="fp32")  # the precision the graph was exported in
    onnx_p = ContextPruner.from_pretrained(out, quantized=False)
    assert torch_p.backend.name == "torch" and onnx_p.backend.name == "onnx"
    for threshold in (0.3, 0.5, 0.7):
        a = torch_p.prune("Where is Berlin?", PASSAGES, threshold=threshold)
        b = onnx_p.prune("Where is Berlin?", PASSAGES, threshold=threshold)
        for pa, pb in zip(a.passages, b.passages):
            assert [sp[:2] for sp in pa.spans] == [sp[:2] for sp in pb.spans]
        sa = [s.score for p in a.passages for s in p.sentences]
        sb = [s.score for p in b.passages for s in p.sentences]
        assert np.allclose(sa, sb, atol=1e-4)
    # dynamic axes: other batch sizes and lengths run
    long = " ".join(f"Sentence {i} is here." for i in range(150))
    r = onnx_p.prune_batch([("q one?", [long]), ("q two?", PASSAGES)])
    assert len(r) == 2 and len(r[0].passages[0].sentences) == 150


def test_a_checkpoint_runs_its_cached_int8_export_with_no_flags_where_bf16_is_not_native(
    tmp_path, tiny_checkpoint, monkeypatch, caplog, capsys
):
    """`pruner export --cache` writes the export where a no-flag load of the checkpoint finds it:
    on a CPU without native bf16 that load runs the validated int8 graph (the same scores as the
    export folder's), a precision asked for still gets torch, and a checkpoint whose config changed
    after the export (a recalibration) no longer finds it."""
    import logging

    import pruner_model.core.precision as precision
    import torch

    monkeypatch.setenv("PRUNER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"sse4_2", "avx", "avx2", "fma"}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with caplog.at_level(logging.DEBUG, logger="pruner_model.inference.loading"):
        before = ContextPruner.from_pretrained(tiny_checkpoint)
    assert before.backend.name == "torch" and "--cache --quantize int8" in caplog.text  # the hint
    assert main(["export", "--model", str(tiny_checkpoint), "--cache", "--quantize", "int8"]) == 0
    err = capsys.readouterr().err
    assert "cached: on this CPU, loading" in err and str(tmp_path / "cache") in err
    auto = ContextPruner.from_pretrained(tiny_checkpoint)
    assert (auto.backend.name, auto.precision) == ("onnx", "int8") and "cached in" in auto.backend.chosen
    cached = next((tmp_path / "cache" / "onnx").iterdir())
    folder = ContextPruner.from_pretrained(cached, device="cpu")
    a, b = auto.score("Where is the tower?", PASSAGES), folder.score("Where is the tower?", PASSAGES)
    assert all(np.allclose(x, y) for x, y in zip(a.sentence_scores, b.sentence_scores))
    for kwargs in ({"dtype": "fp32"}, {"dtype": "auto"}, {"quantized": False}, {"backend": "torch"}):
        assert ContextPruner.from_pretrained(tiny_checkpoint, **kwargs).backend.name == "torch", kwargs
    # calibration measures the checkpoint itself (torch), cached export or not
    from tests.evaluation.test_evaluate import records

    labeled = tmp_path / "labeled.jsonl"
    labeled.write_text("".join(json.dumps(r) + "\n" for r in records()))
    assert main(["calibrate", "--model", str(tiny_checkpoint), "--data", str(labeled), "--dry-run"]) == 0
    assert ContextPruner.from_pretrained(tiny_checkpoint, quantized=True).precision == "int8"
    original = (tiny_checkpoint / "config.json").read_bytes()
    config = json.loads(original)
    (tiny_checkpoint / "config.json").write_text(json.dumps({**config, "threshold": 0.123}))
    assert ContextPruner.from_pretrained(tiny_checkpoint).backend.name == "torch"
    # where bf16 is native and int8 has no VNNI, or on AMX, the checkpoint's own bf16 is the
    # default, not the cached int8; with VNNI and no AMX, int8 outruns bf16 and is the default
    (tiny_checkpoint / "config.json").write_bytes(original)  # the digest of the cached export again
    bf16_cpu = frozenset({"avx2", "avx512f", "avx512_bf16"})
    speed = {
        "cpu_class": "AVX-512 BF16",
        "int8_ms": 1.0,
        "torch_ms": 2.0,
        "torch_precision": "bf16",
    }  # as measured (test_int8_build)
    (next((tmp_path / "cache" / "onnx").iterdir()) / "speed.json").write_text(json.dumps(speed))
    for flags, backend in (
        (bf16_cpu, "torch"),
        (bf16_cpu | {"avx512_vnni"}, "onnx"),
        (bf16_cpu | {"avx512_vnni", "amx_bf16", "amx_int8"}, "torch"),
    ):
        monkeypatch.setattr(precision, "cpu_flags", lambda flags=flags: flags)
        assert ContextPruner.from_pretrained(tiny_checkpoint).backend.name == backend, flags
    with pytest.raises(SystemExit):  # --cache and --output name two places
        main(["export", "--model", str(tiny_checkpoint), "--cache", "--output", str(tmp_path / "x")])


def test_calibrating_an_onnx_folder_that_serves_int8_is_refused(exported, tmp_path, capsys):
    """An ONNX folder is calibrated as it is served: where that is its int8 graph (which keeps its
    own threshold), `pruner calibrate` says so in one line and writes nothing."""
    from tests.evaluation.test_evaluate import records

    _, out, _ = exported
    labeled = tmp_path / "labeled.jsonl"
    labeled.write_text("".join(json.dumps(r) + "\n" for r in records()))
    before = (out / "config.json").read_text()
    assert main(["calibrate", "--model", str(out), "--data", str(labeled)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "calibrate a full-precision model" in err[0]
    assert (out / "config.json").read_text() == before


def test_an_onnx_folder_serves_its_validated_int8_graph_on_a_cpu_unless_told_otherwise(
    exported, tmp_path, capsys
):
    import shutil

    from pruner_model.commands.common import say_precision

    _, out, report = exported
    assert report["int8_ok"] and "model.int8.onnx" in report["files"]
    auto = ContextPruner.from_pretrained(out, device="cpu")
    assert auto.precision == "int8" and f"{report['int8_agreement']:.3f}" in auto.backend.chosen
    say_precision(auto, None, chosen=True)  # what `pruner serve` prints at start-up
    line = capsys.readouterr().err.strip()
    assert line.startswith("precision: onnx int8 on ") and "--no-quantized for fp32" in line
    assert ContextPruner.from_pretrained(out, quantized=False).precision == "fp32"
    from argparse import Namespace

    from pruner_model.commands.common import load_pruner

    for flag, precision in [(None, "int8"), (False, "fp32"), (True, "int8")]:  # the CLIs' --[no-]quantized
        args = Namespace(backend="auto", dtype=None, quantized=flag)
        assert load_pruner(out, args, say=False, device="cpu").precision == precision
    assert ContextPruner.from_pretrained(out, quantized=True).backend.chosen is None  # asked, not chosen
    for name, change in [
        ("refused", {"int8_ok": False}),
        ("unchecked", {"validated": False}),
        ("listed-only", {"files": ["model.onnx"]}),
    ]:
        other = tmp_path / name
        shutil.copytree(out, other)
        (other / "export_report.json").write_text(json.dumps({**report, **change}))
        assert ContextPruner.from_pretrained(other, device="cpu").precision == "fp32", name
    (other / "export_report.json").unlink()  # an export without its report: fp32
    assert ContextPruner.from_pretrained(other, device="cpu").precision == "fp32"


def test_int8_backend_loads_and_runs(exported):
    _, out, _ = exported
    p = ContextPruner.from_pretrained(out, quantized=True)
    assert p.backend.model_path.name == "model.int8.onnx"
    assert p.prune("q?", PASSAGES).stats.sentences_in == 6


def test_cli_evaluate_quantized(exported, tmp_path, capsys):
    from tests.evaluation.test_evaluate import records

    ckpt, out, _ = exported
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records()))
    args = ["evaluate", "--data", str(data), "--baselines", "none", "--quantized"]
    assert main([*args, "--model", str(out), "--output", str(tmp_path / "r")]) == 0
    assert json.loads((tmp_path / "r" / "report.json").read_text())["groups"] == 3
    # a torch checkpoint has no int8 model: one line that says what to run
    assert main([*args, "--model", str(ckpt), "--output", str(tmp_path / "r2")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and "--quantize int8" in err[-1]
    assert not (tmp_path / "r2").exists()


def test_export_without_token_type_ids(tmp_path, no_tti_tokenizer):
    from pruner_model import PrunerModel
    from tests.conftest import tiny_config

    model = PrunerModel(tiny_config("distilbert")).eval()
    model.save_pretrained(tmp_path / "ckpt")
    no_tti_tokenizer.save_pretrained(tmp_path / "ckpt")
    report = export_onnx(tmp_path / "ckpt", tmp_path / "out")
    assert report["inputs"] == ["input_ids", "attention_mask"] and report["fp32_ok"]
    p = ContextPruner.from_pretrained(tmp_path / "out")
    assert p.backend.input_names == ["input_ids", "attention_mask"]
    assert p.prune("q?", PASSAGES).stats.sentences_in == 6


def test_cli_export_and_errors(tmp_path, tiny_checkpoint, capsys):
    assert main(["export", "--model", str(tiny_checkpoint), "--output", str(tmp_path / "e")]) == 0
    assert "fp32 max" in capsys.readouterr().err
    assert main(["export", "--model", str(tmp_path / "missing"), "--output", str(tmp_path / "x")]) == 2
    assert "not found" in capsys.readouterr().err
    assert (
        main(
            [
                "prune",
                "--model",
                str(tmp_path / "e"),
                "--query",
                "q",
                "--passages",
                str(tmp_path / "nope.json"),
            ]
        )
        == 2
    )


@pytest.mark.parametrize("option", [{"query_match": True}, {"relevance_pooling": "mean"}])
def test_model_options_export_and_match_torch(tmp_path, bert_tokenizer, option):
    import torch

    from pruner_model import PrunerModel
    from tests.conftest import tiny_config

    torch.manual_seed(0)
    model = PrunerModel(tiny_config("bert", **option)).eval()
    if model.match_embedding is not None:
        with torch.no_grad():
            model.match_embedding.weight.normal_()  # an untrained (zero) embedding would prove nothing
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    bert_tokenizer.save_pretrained(ckpt)
    report = export_onnx(ckpt, tmp_path / "onnx")
    assert report["fp32_ok"], report
    torch_pruner = ContextPruner.from_pretrained(ckpt, dtype="fp32")
    onnx_pruner = ContextPruner.from_pretrained(tmp_path / "onnx")
    a = torch_pruner.score("Who built the Eiffel Tower?", PASSAGES)
    b = onnx_pruner.score("Who built the Eiffel Tower?", PASSAGES)
    assert all(np.allclose(x, y, atol=1e-4) for x, y in zip(a.sentence_scores, b.sentence_scores))
    assert np.allclose(a.relevance, b.relevance, atol=1e-4)


def test_int8_gets_its_own_threshold_from_labeled_data(exported, tmp_path, monkeypatch, capsys):
    import shutil

    import pruner_model.export.quantize as quantization

    from tests.evaluation.test_evaluate import records

    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records()))
    ckpt = tmp_path / "ckpt"  # a copy with a threshold calibrated on the data, as users would have
    shutil.copytree(exported[0], ckpt)
    # calibrated on fp32 scores, the precision the graph is exported in
    evaluate = ["evaluate", "--model", str(ckpt), "--data", str(data), "--output", str(tmp_path / "rep")]
    evaluate += ["--dtype", "fp32"]
    assert (
        main(
            [
                *evaluate,
                "--baselines",
                "none",
                "--target-evidence",
                "0.6",
                "--write-threshold",
                "--max-groups",
                "0",
            ]
        )
        == 0
    )
    assert (
        main(
            [*evaluate, "--baselines", "none", "--target-evidence", "0.6", "--write-operating-point", "mine"]
        )
        == 0
    )
    point = json.loads((ckpt / "config.json").read_text())["operating_points"]["mine"]
    capsys.readouterr()
    out = tmp_path / "export"
    argv = [
        "export",
        "--model",
        str(ckpt),
        "--output",
        str(out),
        "--quantize",
        "int8",
        "--calibration-data",
        str(data),
    ]
    assert main(argv) == 0
    report = json.loads((out / "export_report.json").read_text())
    assert report["int8_ok"] and report["int8_calibration_groups"] == 3
    assert abs(report["int8_evidence"] - report["fp32_evidence"]) <= 0.005
    assert "int8 at its threshold" in capsys.readouterr().err
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["int8_threshold"] == pytest.approx(report["int8_threshold"])
    assert read_threshold(out) == pytest.approx(read_threshold(ckpt))  # fp32 keeps the checkpoint's
    assert ContextPruner.from_pretrained(out, quantized=True).config.threshold == pytest.approx(
        report["int8_threshold"]
    )
    # the export keeps the named point for the fp32 graph; the int8 graph, with its own threshold, has none
    fp32 = ContextPruner.from_pretrained(out).selection_params(operating_point="mine")
    assert (fp32.threshold, fp32.relative_floor) == (
        pytest.approx(point["threshold"]),
        point["relative_floor"],
    )
    with pytest.raises(ValueError, match="it has none"):
        ContextPruner.from_pretrained(out, quantized=True).selection_params(operating_point="mine")
    # an int8 model that loses too much is refused with one line, and only fp32 stays
    monkeypatch.setattr(quantization, "INT8_MAX_COMPRESSION_LOSS", -1.0)
    out2 = tmp_path / "export2"
    assert main([*argv[:4], str(out2), *argv[5:]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "int8 at its own threshold keeps" in err[0] and "fp32 export" in err[0]
    assert (out2 / "model.onnx").is_file() and not (out2 / "model.int8.onnx").exists()
    assert (
        main(
            ["export", "--model", str(ckpt), "--output", str(tmp_path / "x"), "--calibration-data", str(data)]
        )
        == 2
    )
    assert "goes with --quantize int8" in capsys.readouterr().err


def test_serving_an_onnx_folder_needs_no_torch(exported):
    """The serving path (pruner_model import, ONNX backend, HTTP app) runs with torch unimportable."""
    import subprocess
    import sys
    import textwrap

    _, out, _ = exported
    script = textwrap.dedent(
        f"""
        import importlib.abc, importlib.util, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is blocked")
        sys.meta_path.insert(0, Block())
        _find = importlib.util.find_spec
        importlib.util.find_spec = lambda n, *a, **k: None if n.split(".")[0] == "torch" else _find(n, *a, **k)
        from fastapi.testclient import TestClient
        from pruner_model import ContextPruner
        from pruner_model.serving.app import create_app
        pruner = ContextPruner.from_pretrained({str(out)!r}, quantized=True)
        with TestClient(create_app(pruner)) as c:
            r = c.post("/v1/prune", json={{"query": "q?", "passages": ["A sentence. Another one."]}})
            assert r.status_code == 200, r.text
        assert sys.modules.get("torch") is None
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_an_unvalidated_int8_export_says_so(tmp_path, tiny_checkpoint, caplog, capsys):
    """--no-validate writes the int8 file unchecked: one warning line at export, `validated: false`
    in the report, and a warning when a quantized load serves it."""
    import logging

    out = tmp_path / "export"
    assert (
        main(
            [
                "export",
                "--model",
                str(tiny_checkpoint),
                "--output",
                str(out),
                "--quantize",
                "int8",
                "--no-validate",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "warning: --no-validate" in err and "int8 file is unchecked" in err
    assert json.loads((out / "export_report.json").read_text())["validated"] is False
    with caplog.at_level(logging.WARNING, logger="pruner_model"):
        ContextPruner.from_pretrained(out, quantized=True)
    assert any("--no-validate" in r.getMessage() for r in caplog.records)
    # a validated export loads without the warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pruner_model"):
        ContextPruner.from_pretrained(out)
    assert not any("--no-validate" in r.getMessage() for r in caplog.records)


def test_int8_keeps_the_feed_forward_outputs_and_heads_in_fp32(exported):
    """The MatMuls whose inputs carry outlier channels, and the heads, stay fp32 in the int8 graph."""
    import onnx

    _, out, report = exported
    kept = set(report["int8_fp32_nodes"])
    assert any("token_head/" in n for n in kept) and any("relevance_head/" in n for n in kept)
    assert any("/output/dense/" in n for n in kept)
    graph = onnx.load(str(out / "model.int8.onnx")).graph
    by_name = {n.name: n.op_type for n in graph.node}
    quantized = {name[: -len("_quant")] for name, op in by_name.items() if op == "MatMulInteger"}
    assert quantized and not quantized & kept, quantized & kept  # some int8 MatMuls, none of these
    assert by_name["/model/token_head/MatMul"] == "MatMul"


def test_int8_is_smoothed_on_labeled_data_and_falls_back_when_that_fails(
    tmp_path, tiny_checkpoint, monkeypatch
):
    """With --calibration-data the export smooths the feed-forward output projections on it and
    quantizes them too (the smoothed fp32 graph is not left behind); a smoothed graph that fails
    the check falls back to fp32 projections; without labels the projections stay fp32."""
    import onnx
    import pruner_model.export.quantize as quantization

    from tests.evaluation.test_evaluate import records

    monkeypatch.setattr(
        quantization, "INT8_MAX_COMPRESSION_LOSS", 1.0
    )  # judged here: the graph, not the tiny model
    monkeypatch.setattr(quantization, "INT8_MAX_EVIDENCE_LOSS", 1.0)
    report = export_onnx(tiny_checkpoint, tmp_path / "out", quantize="int8", calibration_records=records())
    assert report["int8_scheme"] == "smoothed" and report["int8_tried"] == ["smoothed"]
    assert "also judged on" in report["int8_smoothed_on"]  # 3 groups: no others to smooth on
    graph = onnx.load(str(tmp_path / "out" / "model.int8.onnx")).graph
    ops = {n.name: n.op_type for n in graph.node}
    smooth = [
        name for name, op in ops.items() if op == "Mul" and name.endswith("/output/dense/MatMul_smooth")
    ]
    assert len(smooth) == 2  # one per layer of the tiny encoder
    assert all(ops.get(name[: -len("_smooth")] + "_quant") == "MatMulInteger" for name in smooth)
    assert ops["/model/token_head/MatMul"] == "MatMul"  # the heads stay fp32
    left = {p.name for p in (tmp_path / "out").iterdir() if "smooth" in p.name or p.is_dir()}
    assert left == {"int8_smoothing.safetensors"}  # the maxima it passed with; no smoothed graph
    assert report["int8_smoothing_file"] == "int8_smoothing.safetensors"
    # a smoothed graph that fails its check falls back to the fp32 projections, then is refused
    monkeypatch.setattr(quantization, "INT8_MAX_COMPRESSION_LOSS", -1.0)
    with pytest.raises(Exception, match="int8 file not kept"):
        export_onnx(tiny_checkpoint, tmp_path / "out2", quantize="int8", calibration_records=records())
    saved = json.loads((tmp_path / "out2" / "export_report.json").read_text())
    assert saved["int8_tried"] == ["smoothed", "fp32 projections", "fp32 feed-forward"]
    assert saved["int8_scheme"] == "fp32 feed-forward"


def test_a_checkpoint_carrying_smoothing_maxima_exports_smoothed_int8_without_labels(
    tmp_path, tiny_checkpoint, monkeypatch
):
    """The maxima a labeled export wrote, carried in a checkpoint folder, smooth its later exports
    that have no labels (judged by the agreement on the validation sentences); maxima of another
    encoder (another layer count) are ignored and the projections stay fp32."""
    import shutil

    import onnx
    import pruner_model.export.quantize as quantization
    from safetensors.numpy import load_file, save_file

    from tests.evaluation.test_evaluate import records

    monkeypatch.setattr(quantization, "INT8_MAX_COMPRESSION_LOSS", 1.0)
    monkeypatch.setattr(quantization, "INT8_MAX_EVIDENCE_LOSS", 1.0)
    labeled = export_onnx(
        tiny_checkpoint, tmp_path / "labeled", quantize="int8", calibration_records=records()
    )
    assert labeled["int8_scheme"] == "smoothed"
    ckpt = tmp_path / "carrier"
    shutil.copytree(tiny_checkpoint, ckpt)
    shutil.copy(tmp_path / "labeled" / "int8_smoothing.safetensors", ckpt)
    report = export_onnx(ckpt, tmp_path / "out", quantize="int8")
    assert report["int8_scheme"] == "smoothed" and report["int8_tried"] == ["smoothed"]
    assert "int8_smoothing.safetensors" in report["int8_smoothed_on"] and report["int8_ok"]
    assert "int8_smoothing_file" not in report  # nothing measured here: nothing new to carry
    ops = {n.name: n.op_type for n in onnx.load(str(tmp_path / "out" / "model.int8.onnx")).graph.node}
    assert sum(op == "Mul" and name.endswith("/output/dense/MatMul_smooth") for name, op in ops.items()) == 2
    # the same maxima file with one layer missing does not fit this graph: ignored
    maxima = load_file(str(ckpt / "int8_smoothing.safetensors"))
    save_file({"layer.0": maxima["layer.0"]}, str(ckpt / "int8_smoothing.safetensors"))
    report = export_onnx(ckpt, tmp_path / "out2", quantize="int8")
    assert report["int8_tried"][0] == "fp32 projections"


def test_int8_falls_back_to_fp32_feed_forward_when_the_projections_alone_disagree(
    tmp_path, tiny_checkpoint, monkeypatch
):
    """Without labels: the graph with the feed-forward output projections in fp32 is tried first;
    when it disagrees with fp32, both feed-forward projections of every layer stay fp32 too, and
    that graph is kept when it agrees."""
    import onnx
    import pruner_model.export.validate as validation

    real, seen = validation.int8_agreement, []

    def agreement(output_dir, tokenizer, config, items=None):
        out = real(output_dir, tokenizer, config, items)
        seen.append(out["int8_agreement"])
        if len(seen) == 1:  # the first graph is judged as if it disagreed
            out.update(int8_agreement=0.5, int8_ok=False)
        return out

    monkeypatch.setattr(validation, "int8_agreement", agreement)
    out = tmp_path / "out"
    report = export_onnx(tiny_checkpoint, out, quantize="int8")
    assert len(seen) == 2 and report["int8_ok"]
    assert report["int8_tried"] == ["fp32 projections", "fp32 feed-forward"]
    assert report["int8_scheme"] == "fp32 feed-forward" and report["int8_agreement"] == seen[1]
    kept = set(report["int8_fp32_nodes"])
    assert any("/intermediate/dense/" in n for n in kept) and any("/output/dense/" in n for n in kept)
    ops = {n.name: n.op_type for n in onnx.load(str(out / "model.int8.onnx")).graph.node}
    assert not any(op == "MatMulInteger" and "/intermediate/dense/" in name for name, op in ops.items())
    assert any(op in ("MatMulInteger", "QAttention") for op in ops.values())  # the rest is int8
    assert (out / "model.int8.onnx").is_file() and "model.int8.onnx" in report["files"]


def test_int8_is_smoothed_on_groups_apart_from_those_it_is_judged_on(tiny_checkpoint):
    from pruner_model.core.configuration import PrunerConfig
    from pruner_model.evaluation.groups import load_range
    from pruner_model.export.smoothing import GROUPS, smoothing_text

    from tests.evaluation.test_evaluate import records as labeled_records

    records = labeled_records(GROUPS + 10)
    config = PrunerConfig.from_pretrained(str(tiny_checkpoint))
    groups, where = smoothing_text(records, config, judged=10)
    judged = {g.query for g in load_range(records, 0, 0, 10)}
    assert len(groups) == GROUPS and not judged & {g.query for g in groups}
    assert "apart from those judged on" in where
