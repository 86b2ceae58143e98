"""Public QA data sets in their published formats, read into one shape (:class:`.sources.Example`).

The product reads these files only from a folder the user names (``pruner data qa --from DIR``
or ``$PRUNER_QA_DATA``): the layout is the one of the public QA pack (``squad/dev-v1.1.json``,
``squadshifts/new_wiki_v1.0.json``, ...; ``docs/data.md`` says where each file comes from and
its licence). Every file is checked against the sha256 in ``qa_files.tsv`` (this package's copy
of the pack's manifest) before it is read: a missing or altered file is one line naming it and
the sha256 it should have.

How each set's labels are derived:

==============  ==========================================================  ==================
set             evidence                                                    text
==============  ==========================================================  ==================
SQuAD format    the sentence(s) the reference answer span overlaps; the     Wikipedia, papers,
                document is the whole article (paragraphs joined by blank   policies
                lines), so other paragraphs are same-document distractors
``friendsqa``   the sentence of the utterance that holds the answer (a      TV dialogue
                speaker answer: the utterance's first sentence)
``selqa``       the candidate sentences marked as answers                   Wikipedia
``tweetqa``     the sentence holding the answer string; passage-level       tweets
                where the annotator's words are not in the tweet
``boolq``       none: yes/no. The passage is relevant, its sentences        Wikipedia, real
                unlabeled (``passage_only``: trains the relevance head)     search queries
``pubmedqa``    none: yes/no/maybe over an abstract (``passage_only``)      PubMed abstracts
==============  ==========================================================  ==================

ROPES is not read: its answers come from the situation while the reasoning needs the background
paragraph, so no sentence label follows from the answer string. The sets reserved for outside
evaluation (CoQA, SQuADShifts reddit and amazon, WikiQA, TrecQA, and the passages CoQA reused)
are not in the pack and have no reader here.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pruner_model.annotation.sources import Example, SourceReport, evidence_sentences, find_all
from pruner_model.core.records import RecordError
from pruner_model.core.segmentation import segment

ENV = "PRUNER_QA_DATA"  # the folder of the public QA files when --from is not given


@dataclass(frozen=True)
class QASet:
    """One data set of the pack as the product reads it."""

    files: tuple[str, ...]  # paths inside the pack folder
    reader: str  # key of READERS
    language: str = "en"
    text: str = ""  # what kind of text, for reports
    licence: str = ""
    distributable: bool = True  # False: evaluation only, never in a shipped model's training data


def _tydi(lang: str, *splits: str) -> tuple[str, ...]:
    return tuple(f"tydiqa_goldp/{lang}_tydiqa_{s}.json" for s in splits)


SETS: dict[str, QASet] = {
    # English, may train a distributed model
    "squad": QASet(("squad/dev-v1.1.json",), "squad", text="Wikipedia", licence="CC BY-SA 4.0"),
    "new_wiki": QASet(
        ("squadshifts/new_wiki_v1.0.json",), "squad", text="Wikipedia (newer articles)", licence="CC BY 4.0"
    ),
    "tydiqa_en": QASet(
        _tydi("english", "train", "dev"), "squad", text="Wikipedia, information-seeking", licence="Apache 2.0"
    ),
    "selqa": QASet(
        ("selqa/selqa-ass-dev.json", "selqa/selqa-ass-test.json"),
        "selqa",
        text="Wikipedia sections",
        licence="Apache 2.0",
    ),
    "tweetqa": QASet(
        ("tweetqa/train.json", "tweetqa/dev.json"), "tweetqa", text="tweets", licence="CC BY-SA 4.0"
    ),
    "boolq": QASet(("boolq/dev.jsonl",), "boolq", text="Wikipedia, search queries", licence="CC BY-SA 3.0"),
    "pubmedqa": QASet(("pubmedqa/ori_pqal.json",), "pubmedqa", text="PubMed abstracts", licence="MIT"),
    "friendsqa": QASet(
        ("friendsqa/friendsqa_dev.json", "friendsqa/friendsqa_tst.json"),
        "friendsqa",
        text="TV dialogue",
        licence="Apache 2.0",
    ),
    "covidqa": QASet(
        ("covidqa/200423_covidQA.json",), "squad", text="biomedical papers", licence="Apache 2.0"
    ),
    # evaluation only
    "policyqa": QASet(
        ("policyqa/dev.json", "policyqa/test.json"),
        "squad",
        text="privacy policies",
        licence="MIT code; OPP-115 passages, non-commercial research",
        distributable=False,
    ),
    # other languages (SQuAD format)
    "xquad_en": QASet(
        ("xquad/xquad.en.json",), "squad", text="Wikipedia (translated SQuAD)", licence="CC BY-SA 4.0"
    ),
    **{
        f"xquad_{lang}": QASet(
            (f"xquad/xquad.{lang}.json",), "squad", lang, "Wikipedia (translated)", "CC BY-SA 4.0"
        )
        for lang in ("ar", "de", "el", "es", "hi", "ro", "ru", "th", "tr", "vi", "zh")
    },
    **{
        f"tydiqa_{code}": QASet(_tydi(name, *splits), "squad", code, "Wikipedia", "Apache 2.0")
        for name, code, splits in (
            ("arabic", "ar", ("dev",)),
            ("bengali", "bn", ("dev",)),
            ("finnish", "fi", ("dev",)),
            ("indonesian", "id", ("dev",)),
            ("korean", "ko", ("train", "dev")),
            ("russian", "ru", ("dev",)),
            ("swahili", "sw", ("train", "dev")),
            ("telugu", "te", ("dev",)),
        )
    },
    "cmrc2018": QASet(
        ("cmrc2018/cmrc2018_dev.json", "cmrc2018/cmrc2018_trial.json"),
        "squad",
        "zh",
        "Wikipedia",
        "CC BY-SA 4.0",
    ),
    "drcd": QASet(("drcd/DRCD_dev.json", "drcd/DRCD_test.json"), "squad", "zh", "Wikipedia", "CC BY-SA 3.0"),
    "arcd": QASet(("arcd/arcd.json",), "squad", "ar", "Wikipedia", "MIT"),
    "korquad": QASet(
        ("korquad/KorQuAD_v1.0_dev.json",), "squad", "ko", "Wikipedia", "CC BY-ND 2.0 KR", distributable=False
    ),
    "persianqa": QASet(
        ("persianqa/pqa_test.json",), "squad", "fa", "Wikipedia", "GPL-3.0 (repository)", distributable=False
    ),
}
# the default recipe: English sets a distributed model may train on, and the whole data sets no
# shipped config trains or calibrates on (chosen before training: dialogue, papers, policies)
TRAIN_SETS = ("squad", "new_wiki", "tydiqa_en", "selqa", "tweetqa", "boolq", "pubmedqa")
HELDOUT_SETS = ("friendsqa", "covidqa", "policyqa")


def manifest() -> dict[str, str]:
    """Pack path -> expected sha256, from the package's copy of the pack's manifest."""
    text = resources.files("pruner_model.annotation").joinpath("qa_files.tsv").read_text(encoding="utf-8")
    rows = [line.split("\t") for line in text.splitlines()[1:] if line.strip()]
    return {row[0]: row[1] for row in rows}


def pack_folder(folder: str | Path | None = None) -> Path:
    """The pack folder: ``folder``, else ``$PRUNER_QA_DATA``; a one-line error when neither is given
    or it is not a folder."""
    named = folder or os.environ.get(ENV)
    if not named:
        raise RecordError(
            f"no QA data folder: give --from DIR (or ${ENV}) naming a folder laid out like the public QA pack "
            "(squad/dev-v1.1.json, squadshifts/new_wiki_v1.0.json, ...; docs/data.md)"
        )
    path = Path(named).expanduser()
    if not path.is_dir():
        raise RecordError(f"{path}: not a folder (--from / ${ENV} names the public QA data folder)")
    return path


def checked_file(folder: Path, rel: str, expected: dict[str, str] | None = None) -> Path:
    """``folder / rel`` after its sha256 is checked against the manifest (one-line errors)."""
    want = (expected or manifest()).get(rel)
    path = folder / rel
    if want is None:
        raise RecordError(f"{rel}: not a file of the public QA pack")
    if not path.is_file():
        raise RecordError(f"{path}: missing (expected the pack's {rel}, sha256 {want})")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != want:
        raise RecordError(f"{path}: damaged or another version (sha256 {digest[:16]}..., expected {want})")
    return path


def load_set(name: str, folder: str | Path | None = None) -> tuple[list[Example], SourceReport]:
    """``(examples, report)`` of one data set of the pack; ``example.source`` is ``name``."""
    if name not in SETS:
        raise ValueError(f"unknown data set {name!r}; choose from {', '.join(SETS)}")
    qa = SETS[name]
    root = pack_folder(folder)
    expected = manifest()
    report = SourceReport()
    out: list[Example] = []
    seen: set[tuple[str, str]] = set()
    for rel in qa.files:
        path = checked_file(root, rel, expected)
        try:
            for ex in READERS[qa.reader](path, name, report):
                if (ex.query, ex.document) in seen:
                    report.skip("duplicate question")
                    continue
                seen.add((ex.query, ex.document))
                report.kept += 1
                out.append(ex)
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise RecordError(
                f"{path}: not in {name}'s published format ({type(exc).__name__}: {exc})"
            ) from None
    return out, report


# ---------------------------------------------------------------------- readers
def _answer_span(ctx: str, answer: dict) -> tuple[int, int] | None:
    """The answer's span: at its published offset, else its text's nearest occurrence (a few
    published offsets are off by some characters)."""
    text, start = str(answer.get("text", "")), answer.get("answer_start")
    if not text:
        return None
    if isinstance(start, int) and ctx[start : start + len(text)] == text:
        return start, start + len(text)
    hits = [i for i in range(len(ctx)) if ctx.startswith(text, i)] if text in ctx else []
    if not hits:
        return None
    best = min(hits, key=lambda i: abs(i - start)) if isinstance(start, int) else hits[0]
    return best, best + len(text)


def _sentences_of(units: list, span: tuple[int, int]) -> list[tuple[int, int]]:
    """The spans of the ``units`` (a document's segmentation) that ``span`` overlaps."""
    s, e = span
    return [(u.start, u.end) for u in units if u.start < e and u.end > s]


def read_squad(path: Path, source: str, report: SourceReport) -> Iterator[Example]:
    """SQuAD-format JSON: one document per article (its paragraphs joined by blank lines; TyDi QA's
    one-paragraph entries are joined by title)."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    articles: dict[str, list[dict]] = {}
    for ai, article in enumerate(data):
        key = str(article.get("title") or f"#{ai}")
        articles.setdefault(key, []).extend(article.get("paragraphs", []))
    for paragraphs in articles.values():
        doc, offsets = "", []
        for para in paragraphs:
            ctx = str(para.get("context", ""))
            offsets.append(len(doc) + (2 if doc else 0))
            doc = f"{doc}\n\n{ctx}" if doc else ctx
        units = segment(doc)
        for para, base in zip(paragraphs, offsets):
            ctx = str(para.get("context", ""))
            for qa in para.get("qas", []):
                report.questions += 1
                query = str(qa.get("question", "")).strip()
                if not query or not ctx.strip():
                    report.skip("empty question or context")
                    continue
                qid = f"{source}:{qa.get('id', report.questions)}"
                if qa.get("is_impossible"):
                    yield Example(qid, source, query, doc, [], answerable=False)
                    continue
                span = next((sp for a in qa.get("answers", []) if (sp := _answer_span(ctx, a))), None)
                if span is None:
                    report.unmapped += 1
                    continue
                answers = [str(a.get("text", "")) for a in qa.get("answers", []) if a.get("text")]
                evidence = _sentences_of(units, (base + span[0], base + span[1]))
                yield Example(qid, source, query, doc, evidence, answers)


def read_friendsqa(path: Path, source: str, report: SourceReport) -> Iterator[Example]:
    """FriendsQA: a scene's utterances as ``Speaker: words`` paragraphs; the evidence is the
    answering utterance's sentence holding the answer's words."""
    for scene in json.loads(path.read_text(encoding="utf-8"))["data"]:
        for para in scene.get("paragraphs", []):
            utterances = para.get("utterances:") or para.get("utterances") or []
            doc, starts = "", {}
            for u in utterances:
                line = f"{' and '.join(u.get('speakers') or ['Someone'])}: {u.get('utterance', '')}".strip()
                starts[u["uid"]] = (len(doc) + (2 if doc else 0), len(line))
                doc = f"{doc}\n\n{line}" if doc else line
            units = segment(doc)
            for qa in para.get("qas", []):
                report.questions += 1
                query = str(qa.get("question", "")).strip()
                answers = qa.get("answers") or []
                first = answers[0] if answers else None
                if not query or first is None or first.get("utterance_id") not in starts:
                    report.unmapped += 1
                    continue
                start, length = starts[first["utterance_id"]]
                words = [str(a.get("answer_text", "")).strip() for a in answers if a.get("answer_text")]
                hits = [] if first.get("is_speaker") else find_all(doc[start : start + length], words[0])
                span = (start + hits[0][0], start + hits[0][1]) if hits else (start, start + 1)
                evidence = _sentences_of(units, span)
                yield Example(f"{source}:{qa.get('id')}", source, query, doc, evidence, words)


def read_selqa(path: Path, source: str, report: SourceReport) -> Iterator[Example]:
    """SelQA answer-sentence selection: the section's candidate sentences, the marked ones evidence."""
    for i, row in enumerate(json.loads(path.read_text(encoding="utf-8"))):
        report.questions += 1
        doc, spans = "", []
        for sent in row["candidates"]:
            start = len(doc) + (1 if doc else 0)
            doc = f"{doc} {sent}" if doc else str(sent)
            spans.append((start, len(doc)))
        query = str(row.get("question", "")).strip()
        picked = [spans[k] for k in row.get("answers", []) if 0 <= k < len(spans)]
        qid = f"{source}:{path.stem}:{i}"
        if not query or not doc:
            report.skip("empty question or candidates")
        elif picked:
            yield Example(qid, source, query, doc, picked)
        else:
            yield Example(qid, source, query, doc, [], answerable=False)


def read_tweetqa(path: Path, source: str, report: SourceReport) -> Iterator[Example]:
    """TweetQA: the sentence holding the annotator's answer words, else the tweet as a whole."""
    for row in json.loads(path.read_text(encoding="utf-8")):
        report.questions += 1
        doc, query = str(row.get("Tweet", "")).strip(), str(row.get("Question", "")).strip()
        if not doc or not query:
            report.skip("empty question or tweet")
            continue
        answers = [str(a).strip() for a in row.get("Answer") or [] if str(a).strip()]
        qid = f"{source}:{row.get('qid')}"
        lower = doc.lower()
        hit = next((a for a in answers if a.lower() in lower), None)
        if hit is None:
            yield Example(qid, source, query, doc, [], answers, passage_only=True)
            continue
        i = lower.find(hit.lower())
        yield Example(qid, source, query, doc, evidence_sentences(query, doc, [(i, i + len(hit))]), answers)


def read_boolq(path: Path, source: str, report: SourceReport) -> Iterator[Example]:
    """BoolQ: yes/no over a Wikipedia passage; relevant as a whole."""
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        row = json.loads(line)
        report.questions += 1
        query = str(row["question"]).strip()
        query = query[:1].upper() + query[1:] + ("" if query.endswith("?") else "?")
        yield Example(f"{source}:{i}", source, query, str(row["passage"]), [], passage_only=True)


def read_pubmedqa(path: Path, source: str, report: SourceReport) -> Iterator[Example]:
    """PubMedQA PQA-L: the abstract's sections (without its conclusion) relevant as a whole."""
    for pmid, row in json.loads(path.read_text(encoding="utf-8")).items():
        report.questions += 1
        doc = "\n\n".join(str(c) for c in row["CONTEXTS"])
        yield Example(f"{source}:{pmid}", source, str(row["QUESTION"]).strip(), doc, [], passage_only=True)


READERS: dict[str, Callable[[Path, str, SourceReport], Iterator[Example]]] = {
    "squad": read_squad,
    "friendsqa": read_friendsqa,
    "selqa": read_selqa,
    "tweetqa": read_tweetqa,
    "boolq": read_boolq,
    "pubmedqa": read_pubmedqa,
}
