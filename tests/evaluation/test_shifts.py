"""Shifted evaluation slices and text noise: spans survive every edit, slices are what they say."""

import json
import random

import pytest
from pruner_model.evaluation.groups import content_words, group_of
from pruner_model.evaluation.shifts import build_shift
from pruner_model.evaluation.textnoise import noisy_record, noisy_text

from pruner_model.cli import main


def records():
    out = []
    topics = [
        ("tower", "Paris", "1889"),
        ("bridge", "London", "1894"),
        ("dam", "Nevada", "1936"),
        ("canal", "Panama", "1914"),
    ]
    for a, (thing, place, year) in enumerate(topics):
        for p in range(3):
            ctx = f"The {thing} of {place} is famous. It was finished in {year}. Tourists visit the {thing} often."
            gold = p == 0
            s = ctx.index("It was")
            out.append(
                {
                    "id": f"q{a}/src:{a}:{p}",
                    "query": f"When was the {thing} of {place} finished?",
                    "context": ctx
                    if gold
                    else f"Paragraph {p} of article {a} talks about weather in {place}. Rain is common.",
                    "relevant_spans": [[s, s + len(f"It was finished in {year}.")]] if gold else [],
                    "meta": {"answers": [[ctx.index(year), ctx.index(year) + 4]]} if gold else {},
                }
            )
    return out


def test_noisy_text_maps_every_span():
    rng = random.Random(0)
    text = "Hello, World. The Eiffel Tower (Paris) was built in 1889!"
    noisy, new_at = noisy_text(text, rng, drop_punct=0.5, typo=0.2)
    assert noisy == noisy.lower() and len(noisy) <= len(text)
    assert new_at[0] == 0 and new_at[len(text)] == len(noisy)
    assert all(new_at[i] <= new_at[i + 1] for i in range(len(text)))  # monotone
    r = noisy_record(
        {"query": "When?", "context": text, "relevant_spans": [[text.index("1889"), text.index("1889") + 4]]},
        rng,
    )
    (s, e) = r["relevant_spans"][0]
    assert r["context"][s:e].strip() in (
        "1889",
        "189",
        "889",
        "1898",
        "8189",
        "1989",
        "1988",
    )  # a typo at most
    assert r["query"] == "when?"


def test_slices_are_what_they_say():
    recs = records()
    as_is = build_shift("as_is", recs)
    assert len(as_is) == len(recs)
    gold = [r for r in as_is if r["relevant_spans"]]
    assert all(r["context"][s:e].startswith("It was finished") for r in gold for s, e in r["relevant_spans"])
    low = build_shift("low_overlap", recs)
    for gid in {group_of(r) for r in low}:
        rs = [r for r in low if group_of(r) == gid]
        answer = {w for r in rs for s, e in r["relevant_spans"] for w in content_words(r["context"][s:e])}
        assert len(content_words(rs[0]["query"]) & answer) <= 1
    mined = build_shift("mined", recs, seed=0)
    by = {}
    for r in mined:
        by.setdefault(group_of(r), []).append(r)
    assert by and all(len(v) <= 5 for v in by.values())
    for gid, rs in by.items():  # the gold passage (when kept) is the group's own, with its answer
        for r in rs:
            if r["relevant_spans"]:
                assert r["id"] == f"{gid}/src:{gid[1:]}:0"
            # each passage says what it is, so per-role numbers work on the slice
            assert r["meta"]["role"] == ("gold" if r["relevant_spans"] else r["meta"]["role"])
            assert r["meta"]["role"] in {"gold", "mined", "random"}
        assert sum(r["meta"]["role"] == "gold" for r in rs) <= 1
    from pruner_model.core.retrieval import TfidfIndex

    index = TfidfIndex(
        ["the tower of paris", "the tower of london", "bananas are yellow", "paris tower tall"]
    )
    assert index.nearest(0, 3)[-1] == 2  # the unrelated text comes last
    assert index.nearest(0, 1, exclude=__import__("numpy").array([0, 1, 0, 1], bool)) == [2]
    noisy = build_shift("noisy", recs, keep={"q0", "q1"})
    assert {group_of(r) for r in noisy} == {"q0", "q1"} and all(
        r["context"] == r["context"].lower() for r in noisy
    )
    with pytest.raises(ValueError, match="unknown slice"):
        build_shift("reddit", recs)


def test_shifts_compose_in_a_fixed_order():
    recs = records()
    mined = build_shift("mined", recs, seed=0)
    both = build_shift("noisy+mined", recs, seed=0)  # mined first, then noisy text
    assert [r["id"] for r in both] == [r["id"] for r in mined]
    assert all(r["context"] == r["context"].lower() for r in both)
    assert [bool(r["relevant_spans"]) for r in both] == [bool(r["relevant_spans"]) for r in mined]
    low = build_shift("mined+low_overlap", recs, seed=0)
    assert low and {r["id"] for r in low} <= {r["id"] for r in mined}
    for name, error in [
        ("mined+as_is", "cannot be combined"),
        ("noisy+noisy", "twice"),
        ("mined+x", "unknown"),
    ]:
        with pytest.raises(ValueError, match=error):
            build_shift(name, recs)


def test_evaluate_cli_runs_a_slice(tiny_checkpoint, tmp_path):
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records()))
    out = tmp_path / "rep"
    argv = [
        "evaluate",
        "--model",
        str(tiny_checkpoint),
        "--data",
        str(data),
        "--output",
        str(out),
        "--baselines",
        "lexical",
    ]
    assert main([*argv, "--slice", "noisy", "--max-groups", "0"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert (
        report["groups"] == 4
        and "lexical_overlap" in report["systems"]
        and "best_f1" in report["systems"]["pruner"]
    )
