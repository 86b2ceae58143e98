import json

import numpy as np
import pytest
from pruner_model.evaluation.baselines import bm25_scores, lexical_scores
from pruner_model.evaluation.groups import load_groups

from pruner_model.cli import main
from tests.conftest import read_threshold


def records(groups: int = 3):
    out = []
    for g in range(groups):
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
    promise = op["at_checkpoint_threshold"]["promise"]  # the checkpoint's threshold, on held-out queries
    assert promise["queries"] == 3 and promise["share"] == op["at_checkpoint_threshold"]["evidence_preserved"]
    assert promise["interval"][0] <= promise["share"] <= promise["interval"][1]
    assert "## The checkpoint's own threshold" in (out / "report.md").read_text()
    assert f"kept {promise['kept']} of 3 queries with evidence" in (out / "report.md").read_text()
    keep_all = report["systems"]["keep_all"]["best_compression_at"]["0.99"]
    assert keep_all["compression"] == 0.0
    assert report["budgets"][1]["compression"] == pytest.approx(0.0)  # budget above everything keeps all
    assert read_threshold(tiny_checkpoint) == pytest.approx(report["recommended_threshold"])
    for pt in report["systems"]["pruner"]["curve"]:
        assert 0 <= pt["compression"] <= 1 and 0 <= pt["evidence_preserved"] <= 1
    assert np.all(np.diff([p["evidence_preserved"] for p in report["systems"]["pruner"]["curve"]]) <= 1e-12)


def test_cli_evaluate_recommends_a_threshold_with_confidence(tmp_path, tiny_checkpoint, capsys):
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records()))
    base = ["evaluate", "--model", str(tiny_checkpoint), "--data", str(data), "--baselines", "none"]
    reports = {}
    for conf in (None, "0.8"):
        out = tmp_path / f"r{conf}"
        extra = [] if conf is None else ["--confidence", conf]
        assert main([*base, "--output", str(out), "--target-evidence", "0.5", *extra]) == 0
        reports[conf] = json.loads((out / "report.json").read_text())
    # 3 queries with evidence: 0.5 needs 2 of them kept; with confidence 0.8 all 3
    # (P(Binomial(3, 0.5) >= 3) = 0.125 <= 0.2)
    assert reports[None]["operating_point"]["evidence_preserved"] == pytest.approx(2 / 3)
    assert reports["0.8"]["operating_point"]["evidence_preserved"] == 1.0
    assert reports["0.8"]["confidence"] == 0.8
    assert "(target evidence 0.5, with confidence 0.8)" in (tmp_path / "r0.8" / "report.md").read_text()
    assert reports["0.8"]["recommended_threshold"] < reports[None]["recommended_threshold"]
    assert "with confidence 0.8" in capsys.readouterr().err
    assert main([*base, "--output", str(tmp_path / "x"), "--confidence", "0.3"]) == 2
    assert "--confidence must be in [0.5, 1)" in capsys.readouterr().err


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


def _random_groups(seed, n=150):
    from pruner_model.evaluation.metrics import ScoredGroup

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 10))
        labels = rng.random(k) < 0.25
        scores = np.clip(rng.random(k) * 0.6 + labels * rng.random(k) * 0.5, 0, 1).round(3)
        out.append(ScoredGroup(scores, labels, rng.integers(5, 40, k)))
    return out


def test_paired_bootstrap_measures_the_queries_as_the_sweep_does_and_separates_luck_from_skill():
    from pruner_model.evaluation.metrics import ScoredGroup, best_compression_at, sweep
    from pruner_model.evaluation.statistics import paired_bootstrap

    a = _random_groups(0)
    rng = np.random.default_rng(1)
    jitter = [
        ScoredGroup(np.clip(g.scores + rng.normal(0, 0.05, len(g.scores)), 0, 1), g.labels, g.tokens)
        for g in a
    ]
    res = paired_bootstrap(a, jitter, samples=300)
    curve_a, curve_b = sweep(a), sweep(jitter)
    for t in ("0.90", "0.95", "0.97", "0.99"):  # on the queries as drawn: the sweep's own numbers
        assert res[f"comp@{t}"]["a"] == pytest.approx(best_compression_at(curve_a, float(t))["compression"])
        assert res[f"comp@{t}"]["b"] == pytest.approx(best_compression_at(curve_b, float(t))["compression"])
        assert res[f"comp@{t}"]["low"] <= res[f"comp@{t}"]["high"]
    assert res["best_f1"]["a"] == pytest.approx(max(p["f1"] for p in curve_a))
    # a system against itself: no difference in any resample
    same = paired_bootstrap(a, a, samples=50)
    assert all(v["diff"] == v["low"] == v["high"] == 0 and v["b_ahead"] == 0 for v in same.values())
    # a system that ranks every answer first is ahead on every resample, and says so
    perfect = [ScoredGroup(np.where(g.labels, 0.9, 0.1), g.labels, g.tokens) for g in a]
    better = paired_bootstrap(a, perfect, samples=200)
    for v in better.values():
        assert v["diff"] > 0 and v["low"] > 0 and v["b_ahead"] == 1.0
    with pytest.raises(ValueError, match="same queries"):
        paired_bootstrap(a, a[:-1])


def test_shift_protocol_compares_two_checkpoints_on_the_same_queries(tmp_path, tiny_checkpoint, capsys):
    import importlib.util
    import shutil
    from pathlib import Path

    import torch

    from pruner_model import PrunerModel

    spec = importlib.util.spec_from_file_location(
        "shift_protocol", Path(__file__).parents[2] / "benchmarks" / "shift_protocol.py"
    )
    protocol = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(protocol)
    other = tmp_path / "other"
    shutil.copytree(tiny_checkpoint, other)
    model = PrunerModel.from_pretrained(other)
    with torch.no_grad():
        model.token_head.weight.mul_(-1.0)  # a different model: reversed token scores
    model.save_pretrained(other)
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records()))
    out = tmp_path / "shift.json"
    argv = ["--model", str(tiny_checkpoint), "--model", str(other), "--data", str(data), "--start", "0"]
    argv += ["--groups", "3", "--slices", "as_is,noisy", "--compare", "40", "--output", str(out)]
    assert protocol.main(argv) == 0
    printed = capsys.readouterr().out
    assert "Paired with ckpt" in printed and "| other | noisy |" in printed
    report = json.loads(out.read_text())
    row = report["results"]["ckpt"]["as_is"]
    lo, hi = row["kept_interval"]
    assert lo <= row["kept"] <= hi and row["verdict"] in {"met", "within chance", "missed"}
    assert f"[{lo:.3f}, {hi:.3f}] {row['verdict']}" in printed
    for sl in ("as_is", "noisy"):
        cmp = report["compare"]["other"][sl]["comp@0.90"]
        first, later = report["results"]["ckpt"][sl], report["results"]["other"][sl]
        assert cmp["a"] == pytest.approx(first["comp@0.90"]) and cmp["b"] == pytest.approx(later["comp@0.90"])
        assert cmp["diff"] == pytest.approx(cmp["b"] - cmp["a"]) and cmp["low"] <= cmp["high"]
    with pytest.raises(SystemExit):
        protocol.main(["--model", str(tiny_checkpoint), "--data", str(data), "--compare", "10"])
    assert "--compare needs at least two --model" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # refused before any scoring
        protocol.main(argv[:4] + ["--data", str(data), "--compare", "-5"])
    assert "--compare takes a number of resamples >= 1, got -5" in capsys.readouterr().err
