import json

import pytest
from pruner_model.annotation.squad import build_groups, load_squad

from pruner_model import segment
from pruner_model.cli import main


def article(title, paras):
    return {"title": title, "paragraphs": paras}


@pytest.fixture
def squad_file(tmp_path):
    ctx_a0 = "Alpha was founded in 1901. Dr. Smith led it for ten years. It closed in 1950."
    ctx_a1 = "Alpha had a famous choir. The choir sang in Paris."
    ctx_a2 = "Alpha's library held 3,000 books."
    ctx_b0 = "Beta is a river. It flows north."
    ctx_c0 = "Gamma is a mountain. It is 3 km high."
    qas = [
        {
            "id": "q1",
            "question": "Who led Alpha?",
            "answers": [{"text": "Dr. Smith", "answer_start": ctx_a0.index("Dr. Smith")}],
        },
        {
            "id": "q2",
            "question": "When did it close?",
            "answers": [  # a second annotator marked a span in another sentence, a third the same
                {"text": "1950", "answer_start": ctx_a0.index("1950")},
                {"text": "ten years", "answer_start": ctx_a0.index("ten years")},
                {"text": "in 1950", "answer_start": ctx_a0.index("in 1950")},
            ],
        },
    ]
    data = {
        "data": [
            article(
                "Alpha",
                [
                    {"context": ctx_a0, "qas": qas},
                    {
                        "context": ctx_a1,
                        "qas": [
                            {
                                "id": "q3",
                                "question": "Where did the choir sing?",
                                "answers": [{"text": "Paris", "answer_start": ctx_a1.index("Paris")}],
                            }
                        ],
                    },
                    {"context": ctx_a2, "qas": []},
                ],
            ),
            article(
                "Beta",
                [
                    {
                        "context": ctx_b0,
                        "qas": [
                            {
                                "id": "q4",
                                "question": "Which way does Beta flow?",
                                "answers": [{"text": "north", "answer_start": ctx_b0.index("north")}],
                            }
                        ],
                    }
                ],
            ),
            article("Gamma", [{"context": ctx_c0, "qas": []}]),
        ]
    }
    path = tmp_path / "tiny_squad.json"
    path.write_text(json.dumps(data))
    return path


def test_groups_have_gold_hard_and_easy_distractors(squad_file):
    paragraphs, questions = load_squad(squad_file, "tiny")
    assert len(paragraphs) == 5 and len(questions) == 4
    records, groups = build_groups(
        paragraphs, questions, passages_per_group=4, hard_distractors=2, no_gold_share=0.0, seed=0
    )
    assert len(groups) == 4 and len(records) == 16
    q1 = [r for r in records if r["id"].startswith("q1/")]
    gold = [r for r in q1 if r["relevant_spans"]]
    assert len(gold) == 1
    ((s, e),) = gold[0]["relevant_spans"]
    assert gold[0]["context"][s:e] == "Dr. Smith led it for ten years."
    assert {u.start for u in segment(gold[0]["context"])} >= {s}  # whole sentence
    hard = [r for r in q1 if r["meta"]["hard"]]
    assert len(hard) == 2 and all(r["title"] == "Alpha" for r in hard)
    easy = [r for r in q1 if not r["meta"]["gold"] and not r["meta"]["hard"]]
    assert easy and all(r["title"] != "Alpha" for r in easy)
    assert len({r["id"] for r in records}) == len(records)
    g1 = next(g for g in groups if g["id"] == "q1")
    assert len(g1["passages"]) == 4 and all(set(p) == {"id", "title", "text"} for p in g1["passages"])


def test_first_or_all_answers(squad_file):
    paragraphs, questions = load_squad(squad_file, "tiny")

    def q2_spans(all_answers):
        records, _ = build_groups(paragraphs, questions, 3, no_gold_share=0.0, all_answers=all_answers)
        (gold,) = [r for r in records if r["id"].startswith("q2/") and r["meta"]["gold"]]
        return [gold["context"][s:e] for s, e in gold["relevant_spans"]]

    assert q2_spans(False) == ["It closed in 1950."]
    assert q2_spans(True) == ["Dr. Smith led it for ten years.", "It closed in 1950."]


def test_some_groups_have_no_gold(squad_file):
    paragraphs, questions = load_squad(squad_file, "tiny")
    records, groups = build_groups(paragraphs, questions, passages_per_group=3, no_gold_share=1.0, seed=0)
    assert all(not r["relevant_spans"] for r in records)
    assert len(groups) == 4


def test_cli_data_squad_file(squad_file, tmp_path):
    out = tmp_path / "out"
    assert (
        main(
            [
                "data",
                "squad",
                "--file",
                f"{squad_file}:tiny",
                "--output",
                str(out),
                "--passages-per-group",
                "3",
                "--no-gold-share",
                "0",
            ]
        )
        == 0
    )
    recs = [json.loads(x) for x in (out / "tiny.jsonl").read_text().splitlines()]
    groups = [json.loads(x) for x in (out / "tiny.groups.jsonl").read_text().splitlines()]
    report = json.loads((out / "report.json").read_text())
    assert report["tiny"]["groups"] == 4 and report["tiny"]["records"] == len(recs) == 12
    assert report["tiny"]["positives"] == 4 and report["tiny"]["groups_without_gold"] == 0
    assert len(groups) == 4
    for r in recs:
        for s, e in r["relevant_spans"]:
            assert 0 <= s < e <= len(r["context"])


def test_without_a_file_it_names_both_ways_to_get_records(tmp_path, capsys):
    assert main(["data", "squad", "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--file PATH" in err[0] and "pruner data qa --from DIR" in err[0]
    assert not (tmp_path / "o").exists()


def test_malformed_squad_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert (
        main(
            [
                "data",
                "squad",
                "--file",
                str(bad),
                "--output",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "not a SQuAD-format" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["squad", "--file", "x.json"], ["qa", "--from", "."]])
def test_an_output_that_is_a_file_is_a_one_line_error_before_any_work(tmp_path, capsys, command):
    from pruner_model.cli import main

    target = tmp_path / "records.jsonl"
    target.write_text("keep me\n")
    assert main(["data", *command, "--output", str(target)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file: give a folder" in err[0] and "Errno" not in err[0]
    assert target.read_text() == "keep me\n"
