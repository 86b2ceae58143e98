"""The retriever-style pool of `pruner data qa` (chunks, roles, splits), on examples read from small
fixtures in the public QA formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pruner_model.annotation.mix import MixSettings, build_mix, chunk_bounds, family, split_of
from pruner_model.annotation.public_qa import READERS
from pruner_model.annotation.sources import SourceReport, find_all

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "qa"
FILES = {
    "squad": "squad.json",
    "friendsqa": "friendsqa.json",
    "selqa": "selqa.json",
    "tweetqa": "tweetqa.json",
    "boolq": "boolq.jsonl",
    "pubmedqa": "pubmedqa.json",
}


def load(source):
    report = SourceReport()
    return list(READERS[source](FIXTURES / FILES[source], source, report)), report


def test_whole_word_matching_does_not_match_inside_numbers():
    assert find_all("a 153-yard run and a 53-yard kick", "53", whole_word=True) == [(21, 23)]
    assert find_all("1,530 fans", "1", whole_word=True) == []


def test_chunks_are_whole_sentences_within_the_word_limit():
    doc = " ".join(f"Sentence number {i} has five words." for i in range(10))
    bounds = chunk_bounds(doc, max_words=12)
    assert len(bounds) == 5  # two six-word sentences a chunk
    assert all(len(doc[a:b].split()) <= 12 for a, b in bounds)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(doc)


def _pool_examples():
    examples = []
    for source in FILES:
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
    lighthouse = by_group["squad:h1"]
    roles = {r["meta"]["role"] for r in lighthouse}
    assert "gold" in roles and roles <= {"gold", "same_doc", "mined", "random"}
    gold = [r for r in lighthouse if r["meta"]["role"] == "gold"]
    assert [r["context"][a:b] for r in gold for a, b in r["relevant_spans"]] == [
        "The lighthouse on its pier was built by Ann Lee."
    ]
    for r in lighthouse:
        if r["meta"]["role"] != "gold":
            assert "ann lee" not in r["context"].lower()
    unanswerable = by_group["squad:o2"]
    assert all(r["meta"]["role"] != "gold" and not r["relevant_spans"] for r in unanswerable)
    boolq = [r for r in train if r["source"] == "boolq" and r["meta"]["role"] == "gold"]
    assert boolq and all(r["meta"].get("passage_only") and r["relevant_spans"] == [] for r in boolq)


def test_heldout_sets_go_whole_to_the_heldout_split():
    settings = MixSettings(calibration_share=0.3, dev_share=0.3, heldout_sources=frozenset({"friendsqa"}))
    _, groups, _ = build_mix(_pool_examples(), settings)
    assert {g["id"].split(":", 1)[0] for g in groups["heldout"]} == {"friendsqa"}
    assert not any(
        g["id"].startswith("friendsqa:") for split in ("train", "calibration", "dev") for g in groups[split]
    )


def test_a_heldout_question_whose_document_a_training_set_holds_is_dropped():
    import dataclasses

    examples = _pool_examples()
    squad = next(ex for ex in examples if ex.source == "squad" and ex.answerable)
    twin = dataclasses.replace(squad, qid="friendsqa:twin", source="friendsqa")  # same article
    settings = MixSettings(calibration_share=0.3, dev_share=0.3, heldout_sources=frozenset({"friendsqa"}))
    for order in ([*examples, twin], [twin, *examples]):  # whichever set is read first
        _, groups, stats = build_mix(order, settings)
        ids = {g["id"] for split in groups.values() for g in split}
        assert "friendsqa:twin" not in ids and squad.qid in ids
        assert stats["heldout_shared"] == 1
        assert {g["id"].split(":", 1)[0] for g in groups["heldout"]} == {"friendsqa"}


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
    ex = load("squad")[0][0]
    from pruner_model.annotation.mix import normalized

    records, _, _ = build_mix(
        [ex], MixSettings(calibration_share=0.49, dev_share=0.5), train_texts={normalized(ex.document)}
    )
    assert records["train"] and not records["calibration"] and not records["dev"]


def test_records_validate(tmp_path):
    from pruner_model.core.records import validate_labeled

    records, _, _ = build_mix(_pool_examples(), MixSettings(calibration_share=0.01, dev_share=0.01))
    for r in records["train"]:
        validate_labeled(json.loads(json.dumps(r)))


def _translated(examples, lang="de"):
    """XQuAD-style copies of the SQuAD examples: another text, SQuAD's question ids."""
    import dataclasses

    prefix = "Übersetzung des Artikels. "
    return [
        dataclasses.replace(
            ex,
            qid=f"xquad_{lang}:{ex.qid.split(':', 1)[1]}",
            source=f"xquad_{lang}",
            document=prefix + ex.document,
            evidence=[(a + len(prefix), b + len(prefix)) for a, b in ex.evidence],
        )
        for ex in examples
        if ex.source == "squad"
    ]


def _split_of_group(groups):
    return {g["id"]: split for split, gs in groups.items() for g in gs}


def test_a_translation_is_split_with_the_article_it_translates():
    examples = _pool_examples()
    splits_seen = set()
    for seed in range(6):
        settings = MixSettings(calibration_share=0.3, dev_share=0.3, seed=seed)
        _, groups, stats = build_mix([*examples, *_translated(examples)], settings)
        where = _split_of_group(groups)
        for ex in examples:
            if ex.source == "squad":
                twin = f"xquad_de:{ex.qid.split(':', 1)[1]}"
                assert where[twin] == where[ex.qid], (seed, ex.qid)
                splits_seen.add(where[ex.qid])
        assert stats["heldout_translated"] == 0
    assert len(splits_seen) >= 2  # the articles went to different splits: the rule was exercised


def test_a_heldout_translation_of_a_trained_article_is_dropped():
    examples = _pool_examples()
    some_kept = some_dropped = False
    for seed in range(6):
        settings = MixSettings(
            calibration_share=0.3, dev_share=0.3, seed=seed, heldout_sources=frozenset({"xquad_de"})
        )
        _, groups, stats = build_mix([*examples, *_translated(examples)], settings)
        where = _split_of_group(groups)
        squad = [ex.qid for ex in examples if ex.source == "squad"]
        kept = {q for q in squad if f"xquad_de:{q.split(':', 1)[1]}" in where}
        assert all(where[f"xquad_de:{q.split(':', 1)[1]}"] == "heldout" for q in kept)
        assert kept == {q for q in squad if where.get(q) == "dev"}  # only the unseen articles
        assert stats["heldout_translated"] == len(squad) - len(kept)
        some_kept, some_dropped = some_kept or bool(kept), some_dropped or len(kept) < len(squad)
    assert some_kept and some_dropped  # both sides of the rule were exercised
