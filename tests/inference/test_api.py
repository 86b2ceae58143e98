"""The public face: one import root, the README's Python block, score/rank, SelectionParams as the
single definition of every knob (API, CLI, server), hub ids, notebook rendering."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pruner_model import ContextPruner, SelectionParams
from pruner_model.cli import main

ROOT = Path(__file__).resolve().parents[2]
PASSAGES = [
    "The Statue of Liberty was designed by Bartholdi. Its framework was built in 1884 by Eiffel. Error E1234 "
    "appears here.",
    {"id": "d7", "title": "Paris", "text": "Paris is the capital of France. It lies on the Seine."},
]


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_name(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("pruner_model-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"pruner_model"}
    for part in ("annotation", "training", "inference"):
        assert f"pruner_model/{part}/__init__.py" in names


def test_serve_gpu_extra_has_no_cpu_onnxruntime():
    """onnxruntime and onnxruntime-gpu in one environment can hide the CUDA provider: the GPU
    serving extra (with every extra it names) must not pull the CPU package or torch."""
    import tomllib

    extras = tomllib.loads(Path("pyproject.toml").read_text())["project"]["optional-dependencies"]

    def requirements(extra: str) -> set[str]:
        out = set()
        for req in extras[extra]:
            name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()
            nested = re.search(r"\[(.*)\]", req)
            if name == "pruner-model" and nested:
                for e in nested.group(1).split(","):
                    out |= requirements(e.strip())
            else:
                out.add(name)
        return out

    gpu = requirements("serve-gpu")
    assert "onnxruntime-gpu" in gpu and not gpu & {"onnxruntime", "torch"}
    assert requirements("serve") - gpu == {"onnxruntime"}


def test_readme_python_block_runs(tiny_checkpoint, capsys):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "the README has a Python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"MODEL": str(tiny_checkpoint)})
    assert capsys.readouterr().out.strip()


def test_score_and_rank_agree(tiny_checkpoint):
    pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    scores = pruner.score("Who built the framework?", PASSAGES)
    assert [len(s) for s in scores.sentence_scores] == [len(u) for u in scores.units] == [3, 2]
    assert scores.relevance.shape == (2,)
    result = pruner.prune("Who built the framework?", PASSAGES, threshold=0.0, dedup=False)
    got = [s.score for p in result.passages for s in p.sentences]
    assert np.allclose(np.concatenate(scores.sentence_scores), got)
    ranked = pruner.rank("Who built the framework?", PASSAGES)
    assert [r.index for r in ranked] == np.argsort(-scores.relevance, kind="stable").tolist()
    assert ranked[0].relevance >= ranked[1].relevance and {r.id for r in ranked} == {"0", "d7"}
    assert len(pruner.rank("Who built the framework?", PASSAGES, top_k=1)) == 1
    with pytest.raises(ValueError, match="top_k"):
        pruner.rank("q", PASSAGES, top_k=-1)


def test_must_keep_and_per_call_floor_through_the_api(tiny_checkpoint):
    pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    none = pruner.prune("Who built it?", PASSAGES, threshold=1.0)
    assert none.stats.sentences_out == 0
    kept = pruner.prune("Who built it?", PASSAGES, threshold=1.0, must_keep=[r"E\d{4}", r"\b1884\b"])
    texts = [PASSAGES[0][s.start : s.end] for s in kept.passages[0].sentences if s.kept]
    assert texts == ["Its framework was built in 1884 by Eiffel.", "Error E1234 appears here."]
    # must_keep units go first into a tight budget
    tight = pruner.prune("Who built it?", PASSAGES, threshold=0.0, token_budget=8, must_keep=[r"E\d{4}"])
    assert [s.kept for s in tight.passages[0].sentences] == [False, False, True]
    # a per-call relative floor leaves the checkpoint's setting alone
    before = pruner.config.relative_floor
    pruner.prune("Who built it?", PASSAGES, relative_floor=0.5)
    assert pruner.config.relative_floor == before
    with pytest.raises(ValueError, match="not a valid regular expression"):
        pruner.prune("q", PASSAGES, must_keep=["(unclosed"])
    with pytest.raises(TypeError, match="unknown selection setting 'neighbours'"):
        pruner.prune("q", PASSAGES, neighbours=1)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"threshold": float("nan")}, "threshold must be finite"),
        ({"token_budget": float("inf")}, "token_budget must be finite"),
        ({"token_budget": 2.5}, "token_budget must be a whole number"),
        ({"min_relevance": 1.5}, r"min_relevance must be in \[0.0, 1.0\]"),
        ({"neighbors": 10**9}, r"neighbors must be in \[0, 64\]"),
        ({"dedup": "yes"}, "dedup must be true or false"),
        ({"must_keep": "E\\d+"}, "must_keep must be a list"),
    ],
)
def test_selection_params_reject_bad_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        SelectionParams(**overrides)


def test_every_selection_knob_is_a_cli_flag_and_a_server_field():
    from pruner_model.serving.schemas import PruneBody

    from pruner_model.commands.prune import _prune_parser

    flags = {a.dest for a in _prune_parser()._actions}
    body = set(PruneBody.model_fields)
    for f in dataclasses.fields(SelectionParams):
        assert f.name in flags and f.name in body, f.name


def test_must_keep_from_the_cli(tiny_checkpoint, tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(PASSAGES))
    argv = ["prune", "--model", str(tiny_checkpoint), "--query", "q?", "--passages", str(path)]
    assert main([*argv, "--threshold", "1", "--must-keep", r"E\d{4}", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["text"] == "Error E1234 appears here."
    assert main([*argv, "--must-keep", "(bad"]) == 2
    assert "not a valid regular expression" in capsys.readouterr().err


@pytest.mark.slow
def test_must_keep_from_the_server(tiny_checkpoint):
    from fastapi.testclient import TestClient
    from pruner_model.serving.app import create_app

    with TestClient(create_app(ContextPruner.from_pretrained(tiny_checkpoint))) as client:
        r = client.post(
            "/v1/prune",
            json={"query": "q?", "passages": PASSAGES, "threshold": 1.0, "must_keep": [r"E\d{4}"]},
        )
        assert r.status_code == 200, r.text
        assert r.json()["text"] == "Error E1234 appears here."
        bad = client.post("/v1/prune", json={"query": "q?", "passages": PASSAGES, "must_keep": ["(bad"]})
        assert bad.status_code == 422 and "must_keep" in bad.text


def test_result_renders_in_a_notebook(tiny_checkpoint):
    result = ContextPruner.from_pretrained(tiny_checkpoint).prune(
        "q?", PASSAGES, threshold=1.0, must_keep=["E1234"]
    )
    html = result._repr_html_()
    assert "<span class='kept'" in html and "Error E1234 appears here." in html
    assert "source_text" not in json.dumps(result.to_dict())


def test_prune_batch_progress_bar(tiny_checkpoint, capsys):
    pruner = ContextPruner.from_pretrained(tiny_checkpoint)
    items = [(f"q{i}?", PASSAGES) for i in range(5)]
    out = pruner.prune_batch(items, show_progress_bar=True, queries_per_run=2)
    assert len(out) == 5 and "pruning" in capsys.readouterr().err


def test_from_pretrained_takes_a_hub_id_from_the_cache(tiny_checkpoint, tmp_path, monkeypatch):
    """A repo id resolves through the Hugging Face cache layout, offline."""
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--tiny-pruner"
    shutil.copytree(tiny_checkpoint, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    pruner = ContextPruner.from_pretrained("acme/tiny-pruner")
    assert pruner.prune("q?", PASSAGES).stats.sentences_in == 5
    with pytest.raises(FileNotFoundError, match="acme/missing"):
        ContextPruner.from_pretrained("acme/missing")
