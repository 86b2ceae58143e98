import json

import numpy as np
import pytest
from pruner_model.inference.evaluate import bm25_scores, lexical_scores, load_groups

from pruner_model.cli import main
from pruner_model.config_io import read_threshold


def records():
    out = []
    for g in range(3):
        ctx_gold = f"City {g} is in France. It has a river. The mayor is Bob {g}."
        out.append(
            {
                "id": f"q{g}/gold",
                "query": f"Who is the mayor of city {g}?",
                "context": ctx_gold,
                "relevant_spans": [[ctx_gold.index("The mayor"), len(ctx_gold)]],
            }
        )
        out.append(
            {
                "id": f"q{g}/neg",
                "query": f"Who is the mayor of city {g}?",
                "context": "Bananas are yellow. They grow on trees.",
                "relevant_spans": [],
            }
        )
    return out


def test_baseline_scores_follow_their_definitions():
    groups = load_groups(records())
    assert len(groups) == 3 and groups[0].labels[0].tolist() == [False, False, True]
    lex = lexical_scores(groups[0])
    q = {"mayor", "city", "0"}
    s = {"mayor", "bob", "0"}
    assert lex[0][2] == pytest.approx(0.7 * len(q & s) / len(q) + 0.3 * len(q & s) / len(s))
    assert lex[1].tolist() == [0.0, 0.0]
    bm = bm25_scores(groups)
    assert bm[0][0][0] > bm[0][1][0]  # the gold passage ranks first


def test_cli_evaluate_writes_report_plot_and_threshold(tmp_path, tiny_checkpoint, capsys):
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records()))
    out = tmp_path / "report"
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(tiny_checkpoint),
                "--data",
                str(data),
                "--output",
                str(out),
                "--baselines",
                "all,bm25,lexical",
                "--budgets",
                "8,1000",
                "--target-evidence",
                "1.0",
                "--write-threshold",
            ]
        )
        == 0
    )
    report = json.loads((out / "report.json").read_text())
    assert set(report["systems"]) == {"pruner", "keep_all", "bm25_top_n", "lexical_overlap"}
    assert (out / "curve.png").stat().st_size > 10_000 and "| pruner |" in (out / "report.md").read_text()
    op = report["operating_point"]
    assert op["evidence_preserved"] == 1.0  # target 1.0 is always reachable
    keep_all = report["systems"]["keep_all"]["best_compression_at"]["0.99"]
    assert keep_all["compression"] == 0.0
    assert report["budgets"][1]["compression"] == pytest.approx(0.0)  # budget above everything keeps all
    assert read_threshold(tiny_checkpoint) == pytest.approx(report["recommended_threshold"])
    for pt in report["systems"]["pruner"]["curve"]:
        assert 0 <= pt["compression"] <= 1 and 0 <= pt["evidence_preserved"] <= 1
    assert np.all(np.diff([p["evidence_preserved"] for p in report["systems"]["pruner"]["curve"]]) <= 1e-12)


def test_cli_evaluate_bad_input(tmp_path, tiny_checkpoint, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    assert (
        main(
            ["evaluate", "--model", str(tiny_checkpoint), "--data", str(bad), "--output", str(tmp_path / "o")]
        )
        == 2
    )
    assert "lacks a string" in capsys.readouterr().err
