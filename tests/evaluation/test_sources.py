"""Per-source evaluation: tokens kept by passage role, the relevance head's ranking, the CLI."""

import json

import numpy as np
import pytest
from pruner_model.evaluation.groups import load_groups
from pruner_model.evaluation.metrics import ScoredGroup
from pruner_model.evaluation.sources import (
    kept_by_answer_size,
    passage_ranking,
    passage_role,
    role_token_shares,
)

from pruner_model.cli import main


def group_records(gid, source, with_gold=True):
    gold = "The mayor is Bob. He was elected in 2001."
    rows = [
        ("gold", gold, [[0, 17]]) if with_gold else ("same_doc", gold, []),
        ("mined", "The mayor of another town is Ann. She likes trains.", []),
        ("random", "Bananas are yellow. They grow on trees.", []),
    ]
    return [
        {
            "id": f"{gid}/{role}",
            "query": "Who is the mayor?",
            "context": text,
            "relevant_spans": spans,
            "source": source,
            "meta": {"role": role},
        }
        for role, text, spans in rows
    ]


def scored(scores, relevance, tokens=None):
    scores = np.asarray(scores, float)
    return ScoredGroup(
        scores=scores,
        labels=np.array([True, False, False, False, False, False]),
        tokens=np.asarray(tokens or [5] * len(scores)),
        relevance=np.repeat(relevance, 2).astype(float),
    )


def test_role_shares_count_each_roles_tokens_kept():
    (g,) = load_groups(group_records("q1", "nq"))
    s = scored([0.9, 0.1, 0.6, 0.2, 0.05, 0.05], [0.9, 0.5, 0.1])
    shares = role_token_shares([g], [s], threshold=0.5)
    assert shares["gold"] == 0.5 and shares["mined"] == 0.5 and shares["random"] == 0.0
    assert shares["answerless"] is None


def test_groups_without_gold_count_as_answerless():
    (g,) = load_groups(group_records("q2", "nq", with_gold=False))
    s = scored([0.9, 0.9, 0.0, 0.0, 0.0, 0.0], [0.9, 0.5, 0.1])
    s.labels[:] = False
    shares = role_token_shares([g], [s], threshold=0.5)
    assert shares["answerless"] == pytest.approx(1 / 3) and shares["gold"] is None


def test_answers_over_several_sentences_count_kept_only_when_all_are():
    one = ScoredGroup(scores=np.array([0.9, 0.1]), labels=np.array([True, False]), tokens=np.array([5, 5]))
    two = ScoredGroup(
        scores=np.array([0.9, 0.3, 0.1]), labels=np.array([True, True, False]), tokens=np.ones(3)
    )
    four = ScoredGroup(scores=np.array([0.9, 0.8, 0.7, 0.6]), labels=np.ones(4, bool), tokens=np.ones(4))
    none = ScoredGroup(scores=np.array([0.9]), labels=np.array([False]), tokens=np.array([5]))
    sizes = kept_by_answer_size([one, two, four, none], 0.5)  # the second sentence of `two` is dropped
    assert sizes == {
        "1": {"questions": 1, "kept": 1.0},
        "2": {"questions": 1, "kept": 0.0},
        "3+": {"questions": 1, "kept": 1.0},
    }
    assert kept_by_answer_size([one, none], 0.5)["2"] == {"questions": 0, "kept": None}
    assert kept_by_answer_size([two], 0.2)["2"]["kept"] == 1.0


def test_ranking_counts_gold_first_and_pairwise_wins():
    groups = load_groups(group_records("a", "nq") + group_records("b", "nq"))
    good = scored([0] * 6, [0.9, 0.5, 0.1])
    bad = scored([0] * 6, [0.4, 0.5, 0.1])  # a mined passage outranks the gold one
    r = passage_ranking(groups, [good, bad])
    assert r["questions"] == 2 and r["gold_first"] == 0.5
    assert r["gold_over_mined"] == 0.5 and r["gold_over_random"] == 1.0


def test_squad_meta_maps_to_roles():
    assert passage_role({"meta": {"gold": True}}) == "gold"
    assert passage_role({"meta": {"gold": False, "hard": True}}) == "same_doc"
    assert passage_role({"meta": {"gold": False, "hard": False}}) == "random"
    assert passage_role({"meta": {"role": "mined"}}) == "mined"
    assert passage_role({}) is None


@pytest.mark.slow
def test_cli_by_source_reports_each_source(tmp_path, tiny_checkpoint, capsys):
    records = []
    for k in range(4):
        records += group_records(f"n{k}", "nq") + group_records(f"m{k}", "multirc", with_gold=k % 2 == 0)
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "report"
    argv = ["evaluate", "--model", str(tiny_checkpoint), "--data", str(data), "--output", str(out)]
    assert main(argv + ["--by-source"]) == 0
    report = json.loads((out / "sources.json").read_text())
    assert sorted(report["sources"]) == ["multirc", "nq"]
    nq = report["sources"]["nq"]
    assert nq["groups"] == 4 and nq["ranking"]["questions"] == 4
    assert set(nq["tokens_kept_at_0.95"]) == {"gold", "same_doc", "mined", "random", "answerless"}
    assert 0.0 <= nq["at_checkpoint_threshold"]["evidence_preserved"] <= 1.0
    assert report["sources"]["multirc"]["tokens_kept_at_0.95"]["answerless"] is not None
    printed = capsys.readouterr().out
    assert "| nq | 4 |" in printed and "gold ranked first" in printed
    assert nq["kept_by_answer_sentences"]["1"]["questions"] == 4  # each nq answer is one sentence
    assert "| nq | " + f"{nq['kept_by_answer_sentences']['1']['kept']:.3f} (4) | – | – |" in printed
    assert main(argv + ["--by-source", "--slice", "noisy"]) == 2  # one-line error, nothing written


def test_by_source_reports_the_sources_named_operating_point(tmp_path, tiny_checkpoint, capsys):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, model)
    config = json.loads((model / "config.json").read_text())
    config["operating_points"] = {"nq": {"threshold": 0.0, "relative_floor": None}}  # keeps every unit
    (model / "config.json").write_text(json.dumps(config))
    records = []
    for k in range(3):
        records += group_records(f"n{k}", "nq") + group_records(f"m{k}", "multirc")
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "report"
    argv = ["evaluate", "--model", str(model), "--data", str(data), "--output", str(out), "--by-source"]
    assert main(argv) == 0
    sources = json.loads((out / "sources.json").read_text())["sources"]
    nq = sources["nq"]["at_operating_point"]
    assert nq["threshold"] == 0.0 and nq["evidence_preserved"] == 1.0 and nq["compression"] == 0.0
    assert nq["promise"]["verdict"] == "met"
    assert "at_operating_point" not in sources["multirc"]
    rows: dict = {}  # each source's first row: the operating points table
    for line in capsys.readouterr().out.splitlines():
        rows.setdefault(line.split(" | ")[0], line)
    assert "1.000 [" in rows["| nq"] and rows["| multirc"].rstrip(" |").endswith("– | –")


def test_a_score_memo_reuses_the_scores_of_the_same_groups_and_windowing(tiny_checkpoint, monkeypatch):
    from pruner_model.evaluation import scorer
    from pruner_model.evaluation.sources import ScoreMemo, score_at_default
    from pruner_model.inference import ContextPruner

    pruner = ContextPruner.from_pretrained(tiny_checkpoint, backend="torch", dtype="fp32")
    groups = load_groups(group_records("q1", "nq") + group_records("q2", "nq"))
    calls = []
    real = scorer.score_groups
    monkeypatch.setattr(scorer, "score_groups", lambda *a, **k: calls.append(1) or real(*a, **k))
    memo = ScoreMemo()
    first, _, _ = score_at_default(pruner, groups, memo=memo)
    again, _, _ = score_at_default(pruner, groups[::-1], memo=memo)  # any order, the same groups
    assert len(calls) == 1
    assert [a.scores.tolist() for a in again] == [f.scores.tolist() for f in first[::-1]]
    score_at_default(pruner, load_groups(group_records("q3", "nq")), memo=memo)  # a group it lacks
    pruner.config.stride = pruner.config.stride // 2  # other windows: other scores
    score_at_default(pruner, groups, memo=memo)
    assert len(calls) == 3
