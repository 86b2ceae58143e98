"""The bigbench QA converters and the retriever-style mix, on small fixtures in each task's format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pruner_model.annotation.mix import MixSettings, build_mix, chunk_bounds, family, split_of
from pruner_model.annotation.sources import RESERVED_TASKS, TASK_FILES, fetch_task, find_all, load_source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bigbench"


def load(source):
    return load_source(source, FIXTURES / f"{source}.json")


def evidence_text(ex):
    return [ex.document[a:b] for a, b in ex.evidence]


def test_nq_labels_the_answer_sentence_and_counts_unmapped_answers():
    examples, report = load("nq")
    assert [e.query for e in examples] == ["who sang the song in the film?", "who wrote the book?"]
    assert evidence_text(examples[0]) == ["The song is performed by Lady Pamela Hicks in the film ."]
    # "Ann Lee" occurs twice: the sentence sharing the most words with the question is the evidence
    assert evidence_text(examples[1]) == ["The book was written by Ann Lee ."]
    assert report.unmapped == 1 and report.mapping_failure_rate == pytest.approx(1 / 3)
    # the substituted answer and the original one: a mined passage must hold neither
    assert examples[0].answers == ["Lady Pamela Hicks", "Marilyn Monroe"]


def test_multirc_evidence_is_the_marked_sentences():
    examples, report = load("multirc")
    (ex,) = examples
    assert ex.document == "Tom went to the market . He bought apples . Then he went home ."
    assert ex.query == "What did Tom buy at the market?"
    assert evidence_text(ex) == ["Tom went to the market .", "He bought apples ."]
    assert report.unmapped == 1  # sentence 7 does not exist


def test_disfl_qa_finds_answers_in_spaced_out_text_and_keeps_unanswerable_questions():
    examples, _ = load("disfl_qa")
    answered, unknown = examples
    assert evidence_text(answered) == ["It has 40 , 000 residents ."]
    assert not unknown.answerable and unknown.evidence == []


def test_quoref_labels_the_fact_and_the_nearest_mention_of_the_answer():
    (ex,), _ = load("quoref")
    assert evidence_text(ex) == ["Heseltine met Delius at school.", "His first serious works date from 1915."]


def test_drop_keeps_spans_and_measurements_but_not_counts_or_arithmetic():
    examples, report = load("drop")
    assert [evidence_text(e) for e in examples] == [
        ["Brown kicked a 53-yard goal."],
        ["Kicker Janikowski made a 33-yard field goal."],
    ]
    assert report.skipped == {"count question": 1, "arithmetic question": 1}


def test_cosmosqa_is_passage_level_and_duplicates_are_dropped():
    examples, report = load("cosmosqa")
    (ex,) = examples
    assert ex.passage_only and ex.evidence == []
    assert report.skipped == {"duplicate question": 1}


def test_whole_word_matching_does_not_match_inside_numbers():
    assert find_all("a 153-yard run and a 53-yard kick", "53", whole_word=True) == [(21, 23)]
    assert find_all("1,530 fans", "1", whole_word=True) == []


def test_the_reserved_coqa_task_is_never_a_source():
    assert not any(r in path for r in RESERVED_TASKS for path in TASK_FILES.values())
    with pytest.raises(ValueError, match="unknown source"):
        fetch_task("coqa")


def test_chunks_are_whole_sentences_within_the_word_limit():
    doc = " ".join(f"Sentence number {i} has five words." for i in range(10))
    bounds = chunk_bounds(doc, max_words=12)
    assert len(bounds) == 5  # two six-word sentences a chunk
    assert all(len(doc[a:b].split()) <= 12 for a, b in bounds)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(doc)


def _pool_examples():
    examples = []
    for source in ("nq", "multirc", "disfl_qa", "quoref", "drop", "cosmosqa"):
        examples += load(source)[0]
    return examples


def test_mix_groups_have_roles_spans_inside_their_chunk_and_no_answer_in_negatives():
    examples = _pool_examples()
    settings = MixSettings(passages_per_group=4, no_gold_share=0.0, calibration_share=0.01, dev_share=0.01)
    records, groups, stats = build_mix(examples, settings)
    train = records["train"]
    assert len(groups["train"]) + len(groups["calibration"]) + len(groups["dev"]) == len(examples)
    by_group = {}
    for r in train:
        by_group.setdefault(r["id"].split("/", 1)[0], []).append(r)
        for a, b in r["relevant_spans"]:
            assert 0 <= a < b <= len(r["context"])
    nq = by_group["nq:0"]
    roles = {r["meta"]["role"] for r in nq}
    assert "gold" in roles and roles <= {"gold", "same_doc", "mined", "random"}
    gold = [r for r in nq if r["meta"]["role"] == "gold"]
    assert [r["context"][a:b] for r in gold for a, b in r["relevant_spans"]] == [
        "The song is performed by Lady Pamela Hicks in the film ."
    ]
    for r in nq:
        if r["meta"]["role"] != "gold":
            assert "lady pamela hicks" not in r["context"].lower()
    unknown = by_group["disfl_qa:1"]
    assert all(r["meta"]["role"] != "gold" and not r["relevant_spans"] for r in unknown)
    cosmos = [r for r in train if r["source"] == "cosmosqa" and r["meta"]["role"] == "gold"]
    assert cosmos and all(r["meta"].get("passage_only") and r["relevant_spans"] == [] for r in cosmos)


def test_training_groups_take_train_mined_passages_and_evaluation_groups_take_mined():
    def mined_per_split(settings):
        records, _, _ = build_mix(_pool_examples(), settings)
        return {
            split: sum(r["meta"]["role"] == "mined" for r in recs) for split, recs in records.items() if recs
        }

    shares = {"calibration_share": 0.3, "dev_share": 0.3}
    none = mined_per_split(MixSettings(mined=0, train_mined=0, **shares))
    hard = mined_per_split(MixSettings(mined=0, train_mined=3, **shares))
    held_back = set(hard) - {"train"}  # calibration and dev groups stand for a retriever's
    assert "train" in hard and held_back and set(none) == set(hard)
    assert not any(none.values())
    assert hard["train"] > 0 and not any(hard[split] for split in held_back)
    settings = MixSettings(mined=2, train_mined=None)
    assert settings.mined_in("train") == settings.mined_in("dev") == 2  # train_mined None: mined
    assert MixSettings().mined_in("train") == 3 and MixSettings().mined_in("dev") == 2  # as the CLI
    assert MixSettings(mined=2, train_mined=3).mined_in("train") == 3
    with pytest.raises(ValueError, match="mined passages must be >= 0"):
        MixSettings(train_mined=-1)


def test_no_gold_share_removes_the_gold_passages():
    records, _, _ = build_mix(
        _pool_examples(), MixSettings(no_gold_share=1.0, calibration_share=0.01, dev_share=0.01)
    )
    assert not any(r["meta"]["role"] == "gold" for r in records["train"])


def test_documents_split_by_family_and_squad_training_text_stays_in_train():
    a = "The song is performed by X in the film . More text follows here ."
    b = "The song is performed by X in the film . More text follows here !"  # one family
    assert family(a) == family(b)
    assert split_of(family(a), 0, (0.5, 0.5)) in ("calibration", "dev")
    (ex,), _ = load("quoref")
    from pruner_model.annotation.mix import normalized

    records, _, _ = build_mix(
        [ex], MixSettings(calibration_share=0.49, dev_share=0.5), train_texts={normalized(ex.document)}
    )
    assert records["train"] and not records["calibration"] and not records["dev"]


def test_pruner_data_mix_rejects_unknown_sources(tmp_path):
    from pruner_model.commands.data import data_main

    with pytest.raises(ValueError, match="unknown source 'coqa'"):
        data_main(["mix", "--sources", "coqa", "--output", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_records_validate(tmp_path):
    from pruner_model.core.records import validate_labeled

    records, _, _ = build_mix(_pool_examples(), MixSettings(calibration_share=0.01, dev_share=0.01))
    for r in records["train"]:
        validate_labeled(json.loads(json.dumps(r)))


def test_hindi_question_is_the_last_sentence_and_evidence_the_answers_sentence():
    examples, report = load("hindi")
    assert [e.query for e in examples] == ["दिल्ली किस नदी के किनारे है?"]
    assert evidence_text(examples[0]) == ["यह यमुना नदी के किनारे बसा है।"]  # cut at the danda
    assert report.unmapped == 1 and report.skipped == {"unparsed": 1}


def test_parsinlu_labels_every_answers_sentence():
    examples, report = load("parsinlu")
    assert examples[0].query == "کدام شهرها بزرگ هستند؟" and examples[0].answers == ["اصفهان", "تبریز"]
    assert evidence_text(examples[0]) == ["اصفهان و تبریز شهرهای بزرگی هستند."]
    assert evidence_text(examples[1]) == ["برنج آب زیادی می\u200cخواهد."]
    assert report.unmapped == 1


def test_the_default_mix_is_english():
    from pruner_model.commands.data import _mix_parser

    assert "hindi" not in _mix_parser().parse_args([]).sources
