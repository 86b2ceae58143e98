"""Where bf16 is not native, the first no-flag load of a checkpoint builds its int8 export (a real
``pruner export --cache --quantize int8`` in a child process) and runs it; later loads find it;
a failed build says why in one line, runs fp32 and is not tried again until the export is cached
by hand; ``PRUNER_AUTO_INT8=0`` or a precision asked for builds nothing."""

from __future__ import annotations

import logging
import sys
import threading

import numpy as np
import pytest
import torch
from pruner_model.inference import int8_build
from pruner_model.inference.int8_build import build_int8_export, failure_file
from pruner_model.inference.loading import export_cache_dir

from pruner_model import ContextPruner
from pruner_model.cli import main

PASSAGES = ["The tower is in Paris. It was built in 1889.", "Berlin lies on the Spree. It is a city."]


@pytest.fixture
def no_bf16(monkeypatch, tmp_path):
    """An AVX2-only CPU, no GPU, an empty export cache, and builds on (conftest turns them off)."""
    import pruner_model.core.precision as precision

    monkeypatch.setenv("PRUNER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PRUNER_AUTO_INT8", "1")
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"sse4_2", "avx", "avx2", "fma"}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_the_first_no_flag_load_builds_the_int8_export_and_later_loads_run_it(
    tiny_checkpoint, no_bf16, monkeypatch, caplog
):
    with caplog.at_level(logging.WARNING, logger="pruner_model.inference.int8_build"):
        first = ContextPruner.from_pretrained(tiny_checkpoint)
    cache = export_cache_dir(tiny_checkpoint)
    assert (first.backend.name, first.precision) == ("onnx", "int8")
    assert first.backend.cached == cache and (cache / "model.int8.onnx").is_file()
    assert "building the int8 graph" in caplog.text and "int8 graph built in" in caplog.text
    folder = ContextPruner.from_pretrained(cache, device="cpu")  # the export folder's own int8 graph
    a, b = first.score("Where is the tower?", PASSAGES), folder.score("Where is the tower?", PASSAGES)
    assert all(np.allclose(x, y) for x, y in zip(a.sentence_scores, b.sentence_scores))
    monkeypatch.setattr(int8_build.subprocess, "run", lambda *a, **k: pytest.fail("built a second time"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pruner_model.inference.int8_build"):
        again = ContextPruner.from_pretrained(tiny_checkpoint)
    assert again.precision == "int8" and caplog.text == ""
    for kwargs in ({"dtype": "fp32"}, {"quantized": False}, {"backend": "torch"}):
        assert ContextPruner.from_pretrained(tiny_checkpoint, **kwargs).backend.name == "torch", kwargs


def test_a_failed_build_runs_fp32_says_why_and_is_not_tried_again(
    tiny_checkpoint, no_bf16, monkeypatch, caplog
):
    fail = "import sys; sys.stderr.write('warning: noise\\nerror: the export broke\\n'); sys.exit(1)"
    monkeypatch.setattr(int8_build, "EXPORT_COMMAND", [sys.executable, "-c", fail])
    with caplog.at_level(logging.WARNING, logger="pruner_model.inference.int8_build"):
        pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    cache = export_cache_dir(tiny_checkpoint)
    assert (pruner.backend.name, pruner.precision) == ("torch", "fp32")
    assert "int8 build failed (error: the export broke)" in caplog.text and "Traceback" not in caplog.text
    assert failure_file(cache).read_text().strip() == "error: the export broke" and not cache.exists()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pruner_model.inference.int8_build"):
        assert ContextPruner.from_pretrained(tiny_checkpoint).backend.name == "torch"
    assert caplog.text == ""  # not tried again
    assert main(["export", "--model", str(tiny_checkpoint), "--cache", "--quantize", "int8"]) == 0
    assert not failure_file(cache).exists()  # cached by hand: no-flag loads run it
    assert ContextPruner.from_pretrained(tiny_checkpoint).precision == "int8"


def test_no_build_when_turned_off_or_where_the_cache_cannot_be_written(
    tiny_checkpoint, no_bf16, monkeypatch, tmp_path, caplog
):
    monkeypatch.setenv("PRUNER_AUTO_INT8", "0")
    assert ContextPruner.from_pretrained(tiny_checkpoint).backend.name == "torch"
    assert not (tmp_path / "cache").exists()
    monkeypatch.setenv("PRUNER_AUTO_INT8", "1")
    (tmp_path / "a_file").write_text("not a folder")
    monkeypatch.setenv("PRUNER_CACHE", str(tmp_path / "a_file"))
    with caplog.at_level(logging.WARNING, logger="pruner_model.inference.int8_build"):
        assert ContextPruner.from_pretrained(tiny_checkpoint).backend.name == "torch"
    assert "no int8 build for" in caplog.text and "it runs torch" in caplog.text
    assert len(caplog.records) == 1 and "\n" not in caplog.records[0].getMessage()


def test_loads_at_once_build_once(tmp_path, monkeypatch):
    """Two loads that both find no export: one builds, the other waits on the lock and finds it."""
    counter, cache = tmp_path / "builds", tmp_path / "cache" / "onnx" / "digest"
    build = (
        "import pathlib, time; time.sleep(0.5); "
        f"c = pathlib.Path({str(counter)!r}); c.write_text((c.read_text() if c.exists() else '') + 'x'); "
        f"d = pathlib.Path({str(cache)!r}); d.mkdir(parents=True); (d / 'export_report.json').write_text('{{}}')"
    )
    monkeypatch.setattr(int8_build, "EXPORT_COMMAND", [sys.executable, "-c", build])
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(build_int8_export(tmp_path, cache))) for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True, True] and counter.read_text() == "x"


def test_a_build_that_runs_too_long_is_stopped_and_said_so(tmp_path, monkeypatch, caplog):
    cache = tmp_path / "cache" / "onnx" / "digest"
    monkeypatch.setattr(int8_build, "EXPORT_COMMAND", [sys.executable, "-c", "import time; time.sleep(30)"])
    monkeypatch.setattr(int8_build, "TIMEOUT_S", 1)
    with caplog.at_level(logging.WARNING, logger="pruner_model.inference.int8_build"):
        assert build_int8_export(tmp_path, cache) is False
    assert (
        failure_file(cache).read_text().strip() == "stopped after 1 s" and "stopped after 1 s" in caplog.text
    )


def test_where_bf16_is_native_and_int8_has_vnni_the_load_measures_which_is_faster_once(
    tiny_checkpoint, no_bf16, monkeypatch, caplog
):
    """An AVX-512 BF16 CPU with VNNI: the first no-flag load builds the export, loads the checkpoint
    once in torch, lets it choose bf16 or fp32 by agreement, times the int8 graph against that
    precision on one batch and records it; loads follow the record of this CPU class (a record from
    another class, or one without the torch precision, is measured again); an AMX CPU keeps bf16
    and builds nothing."""
    import json

    import pruner_model.core.precision as precision
    from pruner_model.inference import agreement, int8_speed
    from pruner_model.inference.backends import TorchBackend

    bf16_vnni = frozenset({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"})
    monkeypatch.setattr(precision, "cpu_flags", lambda: bf16_vnni)
    loads = []
    torch_load = TorchBackend.from_pretrained.__func__
    monkeypatch.setattr(
        TorchBackend,
        "from_pretrained",
        classmethod(lambda cls, *a, **k: loads.append(1) or torch_load(cls, *a, **k)),
    )
    with caplog.at_level(logging.WARNING, logger="pruner_model.inference"):
        first = ContextPruner.from_pretrained(tiny_checkpoint)
    assert len(loads) == 1  # the checkpoint is read once, for its precision and for the timing
    cache = export_cache_dir(tiny_checkpoint)
    record = json.loads((cache / int8_speed.SPEED_FILE).read_text())
    assert record["cpu_class"] == "AVX-512 BF16" and record["int8_ms"] > 0 and record["torch_ms"] > 0
    assert record["torch_precision"] == "bf16"  # the tiny model's bf16 agrees with fp32
    faster = record["int8_ms"] < record["torch_ms"]
    assert (first.backend.name, first.precision) == (("onnx", "int8") if faster else ("torch", "bf16"))
    assert "on this AVX-512 BF16 CPU int8 (VNNI) outruns bf16: building" in caplog.text
    assert f"no-flag loads run {'int8' if faster else 'bf16'}" in caplog.text
    monkeypatch.setattr(int8_speed, "time_backends", lambda *a: pytest.fail("measured again"))
    for int8_ms, torch_ms, expected in ((5.0, 9.0, "int8"), (9.0, 5.0, "bf16")):
        loads.clear()
        (cache / int8_speed.SPEED_FILE).write_text(
            json.dumps(
                {
                    "cpu_class": "AVX-512 BF16",
                    "int8_ms": int8_ms,
                    "torch_ms": torch_ms,
                    "torch_precision": "bf16",
                }
            )
        )
        assert ContextPruner.from_pretrained(tiny_checkpoint).precision == expected
        assert len(loads) == (expected != "int8")  # an int8 win reads no torch weights
    for stale in (
        {"cpu_class": "AVX2", "int8_ms": 1, "torch_ms": 9, "torch_precision": "bf16"},
        {"cpu_class": "AVX-512 BF16", "int8_ms": 1, "bf16_ms": 9},
    ):
        (cache / int8_speed.SPEED_FILE).write_text(json.dumps(stale))
        monkeypatch.setattr(int8_speed, "time_backends", lambda *a: (7.0, 3.0))
        assert ContextPruner.from_pretrained(tiny_checkpoint).precision == "bf16"  # measured on this class
        assert json.loads((cache / int8_speed.SPEED_FILE).read_text())["int8_ms"] == 7.0
    # where bf16 disagrees with fp32 the torch side runs fp32, and int8 is timed against fp32
    min_agreement = agreement.MIN_AGREEMENT
    monkeypatch.setattr(agreement, "MIN_AGREEMENT", 1.01)
    for int8_ms, torch_ms, expected in ((7.0, 3.0, "fp32"), (3.0, 7.0, "int8")):
        (cache / int8_speed.SPEED_FILE).unlink()
        monkeypatch.setattr(int8_speed, "time_backends", lambda *a, t=(int8_ms, torch_ms): t)
        pruner = ContextPruner.from_pretrained(tiny_checkpoint)
        assert pruner.precision == expected
        assert json.loads((cache / int8_speed.SPEED_FILE).read_text())["torch_precision"] == "fp32"
        assert (pruner.precision_agreement is None) == (expected == "int8")
    assert "cached in" in pruner.backend.chosen  # the int8 that replaced torch says where it came from
    monkeypatch.setattr(agreement, "MIN_AGREEMENT", min_agreement)
    # an int8 file that cannot be loaded leaves torch running, said in one line, nothing recorded
    (cache / int8_speed.SPEED_FILE).unlink()
    graph = (cache / "model.int8.onnx").read_bytes()
    (cache / "model.int8.onnx").write_bytes(b"not a graph")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pruner_model.inference"):
        assert ContextPruner.from_pretrained(tiny_checkpoint).precision == "bf16"
    assert "could not time the int8 graph" in caplog.text and not (cache / int8_speed.SPEED_FILE).exists()
    (cache / "model.int8.onnx").write_bytes(graph)
    monkeypatch.setattr(precision, "cpu_flags", lambda: bf16_vnni | {"amx_bf16", "amx_int8"})
    monkeypatch.setenv("PRUNER_CACHE", str(cache.parent.parent / "other"))
    monkeypatch.setattr(int8_build.subprocess, "run", lambda *a, **k: pytest.fail("built on AMX"))
    assert ContextPruner.from_pretrained(tiny_checkpoint).precision == "bf16"
