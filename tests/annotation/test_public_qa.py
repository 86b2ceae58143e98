"""The public QA readers (each published format, on small fixtures), the sha256 check, and
`pruner data qa` on the real files where the pack is on the machine."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from pruner_model.annotation import public_qa
from pruner_model.annotation.sources import SourceReport
from pruner_model.core.records import RecordError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "qa"
PACK = Path(__file__).resolve().parents[3] / "shared" / "data" / "qa"
needs_pack = pytest.mark.skipif(
    not (PACK / "MANIFEST.tsv").is_file(), reason=f"the public QA files are not at {PACK}"
)


def read(reader: str, name: str):
    report = SourceReport()
    examples = list(public_qa.READERS[reader](FIXTURES / name, reader, report))
    return examples, report


def evidence(ex):
    return [ex.document[a:b] for a, b in ex.evidence]


def test_squad_format_documents_are_articles_and_evidence_is_the_answers_sentence():
    examples, report = read("squad", "squad.json")
    by_id = {e.qid.split(":", 1)[1]: e for e in examples}
    assert set(by_id) == {"h1", "h2", "h3", "o1", "o2"}
    assert report.unmapped == 1  # o3's answer text is nowhere in its paragraph
    # the article is one document: its second paragraph after a blank line
    assert by_id["h3"].document == by_id["h1"].document and "\n\nFishing boats" in by_id["h1"].document
    assert evidence(by_id["h1"]) == [
        "The lighthouse on its pier was built by Ann Lee."
    ]  # offset 4 off: found near it
    assert evidence(by_id["h2"]) == ["The harbour was dredged in 1903."]
    assert evidence(by_id["h3"]) == ["They return with cod and herring by noon."]
    assert not by_id["o2"].answerable and by_id["o2"].evidence == []


def test_friendsqa_evidence_is_the_answering_utterances_sentence():
    examples, _ = read("friendsqa", "friendsqa.json")
    q1, q2 = examples
    assert q1.document.startswith("Monica Geller: There 's nothing to tell !")
    assert evidence(q1) == ["He 's just some guy I work with !"]
    assert evidence(q2)[0].startswith("Chandler Bing: All right Joey")  # a speaker answer: its first sentence


def test_selqa_marks_the_answer_candidates_and_keeps_unanswered_questions():
    (answered, unanswered), _ = read("selqa", "selqa.json")
    assert evidence(answered) == ["Its capital is Harbourton."]
    assert not unanswered.answerable


def test_tweetqa_labels_the_answers_sentence_or_the_whole_tweet():
    (found, free), _ = read("tweetqa", "tweetqa.json")
    assert evidence(found) == ["The circus is coming to town next week."]
    assert free.passage_only and free.evidence == []


def test_boolq_and_pubmedqa_are_passage_level():
    (b,), _ = read("boolq", "boolq.jsonl")
    (p,), _ = read("pubmedqa", "pubmedqa.json")
    assert b.passage_only and b.query == "Is the harbour older than the lighthouse?"
    assert p.passage_only and p.document == "We studied 40 adults.\n\nRecall improved after coffee."


def _fake_pack(tmp_path: Path) -> Path:
    """A folder laid out like the pack holding the squad fixture as squad/dev-v1.1.json."""
    folder = tmp_path / "pack"
    (folder / "squad").mkdir(parents=True)
    shutil.copy(FIXTURES / "squad.json", folder / "squad" / "dev-v1.1.json")
    return folder


def test_a_damaged_or_missing_file_is_one_line_naming_it_and_the_expected_sha256(tmp_path):
    folder = _fake_pack(tmp_path)
    want = public_qa.manifest()["squad/dev-v1.1.json"]
    with pytest.raises(RecordError, match=f"dev-v1.1.json: damaged or another version .*expected {want}"):
        public_qa.load_set("squad", folder)
    with pytest.raises(
        RecordError,
        match=f"new_wiki_v1.0.json: missing .*sha256 {public_qa.manifest()['squadshifts/new_wiki_v1.0.json']}",
    ):
        public_qa.load_set("new_wiki", folder)
    with pytest.raises(RecordError, match="not a folder"):
        public_qa.load_set("squad", tmp_path / "nowhere")


def test_files_whose_sha256_matches_are_read(tmp_path, monkeypatch):
    folder = _fake_pack(tmp_path)
    digest = hashlib.sha256((folder / "squad" / "dev-v1.1.json").read_bytes()).hexdigest()
    monkeypatch.setattr(public_qa, "manifest", lambda: {"squad/dev-v1.1.json": digest})
    monkeypatch.setenv(public_qa.ENV, str(folder))  # the folder from the environment
    examples, report = public_qa.load_set("squad")
    assert len(examples) == 5 and report.kept == 5 and all(e.source == "squad" for e in examples)


def test_the_manifest_covers_every_file_a_set_reads_and_evaluation_only_sets_never_train():
    files = public_qa.manifest()
    assert all(f in files for qa in public_qa.SETS.values() for f in qa.files)
    assert all(public_qa.SETS[s].distributable for s in public_qa.TRAIN_SETS)
    assert not set(public_qa.TRAIN_SETS) & set(public_qa.HELDOUT_SETS)
    reserved = ("coqa", "reddit", "amazon", "wikiqa", "trecqa", "race", "mctest", "cnn", "writingprompts")
    assert not any(r in f.lower() for r in reserved for f in files)


def test_pruner_data_qa_refuses_a_set_in_both_lists_and_unknown_sets(tmp_path):
    from pruner_model.commands.data import data_main

    folder = _fake_pack(tmp_path)
    with pytest.raises(ValueError, match="squad is in both --sets and --heldout"):
        data_main(
            [
                "qa",
                "--from",
                str(folder),
                "--sets",
                "squad",
                "--heldout",
                "squad",
                "--output",
                str(tmp_path / "o"),
            ]
        )
    with pytest.raises(ValueError, match="unknown data set 'coqa'"):
        data_main(["qa", "--from", str(folder), "--sets", "coqa", "--output", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


@needs_pack
@pytest.mark.slow
def test_pruner_data_qa_on_the_public_files_splits_by_document_and_keeps_heldout_sets_whole(tmp_path):
    from pruner_model.commands.data import data_main

    out = tmp_path / "qa"
    args = [
        "qa",
        "--from",
        str(PACK),
        "--output",
        str(out),
        "--sets",
        "selqa,tydiqa_en",
        "--heldout",
        "friendsqa",
    ]
    assert data_main([*args, "--max-train-questions", "300", "--max-dev-questions", "100"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["sets"]["selqa"]["questions"] == 785 + 1590  # the published counts
    assert report["sets"]["tydiqa_en"]["questions"] == 3696 + 440
    assert set(report["heldout"]["per_set"]) == {"friendsqa"}
    assert (
        "friendsqa" not in report["train"]["per_set"] and "friendsqa" not in report["calibration"]["per_set"]
    )
    docs = {}
    for split in ("train", "calibration", "dev"):
        for line in (out / f"{split}.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r["meta"]["role"] == "gold":
                docs.setdefault(r["id"].split("/", 1)[1].rsplit(":", 1)[0], set()).add(split)
    assert docs and all(len(s) == 1 for s in docs.values())  # a document's chunks land in one split
