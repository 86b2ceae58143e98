"""QA sources of the bigbench sdist beyond SQuAD, converted to one shape: a question over a
document, with the document's evidence as character spans.

Each converter reads one task file of ``bigbench==1.0.0`` (the sdist `pruner data squad` already
downloads) and returns :class:`Example` s plus a :class:`SourceReport` that counts what could not
be labeled. How each source's labels are derived:

==============  ==========================================================  ================
source          evidence                                                    domain
==============  ==========================================================  ================
``nq``          sentences holding the answer string (Natural Questions      search queries
                queries over a Wikipedia paragraph whose answer entity was  over Wikipedia
                substituted: the paragraph still holds the answer)
``multirc``     the sentences the annotators marked as needed               news, fiction,
                (multi-sentence)                                            science, law
``disfl_qa``    sentences holding the answer span; "unknown" questions:     Wikipedia,
                the paragraph does not answer (every passage negative)      disfluent queries
``quoref``      sentences holding the answer string                         fiction, Wikipedia
``drop``        the sentence holding a span, date or number answer, where   sports, history
                the answer occurs exactly once as a whole word and the
                question is not arithmetic (counts and differences need
                many sentences; a string match would mislabel them)
``cosmosqa``    none: free-form answers. The passage is relevant, its       personal blogs
                sentences unlabeled (``passage_only``: trains the
                relevance head, not the token head)
``hindi``       the sentence holding the answer string (the question is     Hindi Wikipedia
                the input's last sentence, after its last "।")
``parsinlu``    the sentences holding each answer string (several answers   Persian Wikipedia,
                may all be needed)                                          web
==============  ==========================================================  ================

CoQA (``coqa_conversational_question_answering``) is reserved for an outside evaluation and is
never read here. ROPES is left out: its answers come from the story while the reasoning needs
the background paragraph, so no sentence label follows from the answer string.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pruner_model.annotation.bigbench import extract
from pruner_model.core.records import SOURCE_LANGUAGE, default_cache_dir

RESERVED_TASKS = ("coqa_conversational_question_answering",)  # never read: outside evaluation

TASK_FILES = {
    "nq": "contextual_parametric_knowledge_conflicts/task.json",
    "multirc": "natural_instructions/subtask049_multirc_questions_needed_to_answer/task.json",
    "disfl_qa": "disfl_qa/task.json",
    "quoref": "natural_instructions/subtask002_quoref_answer_generation/task.json",
    "drop": "natural_instructions/subtask028_drop_answer_generation/task.json",
    "cosmosqa": "natural_instructions/subtask024_cosmosqa_answer_generation/task.json",
    # other languages (the multilingual recipe: configs/multilingual.yaml)
    "hindi": "hindi_question_answering/task.json",
    "parsinlu": "parsinlu_reading_comprehension/task.json",
}
LANGUAGE = SOURCE_LANGUAGE  # sources not in English (the rest are "en")
ENGLISH_SOURCES = ("nq", "multirc", "disfl_qa", "quoref", "drop", "cosmosqa")

# the licence each source is distributed under (the original data sets, as BIG-bench cites them)
LICENCES = {
    "nq": "CC BY-SA 3.0 (Natural Questions, Google; contexts from Wikipedia)",
    "multirc": "research use (MultiRC, Khashabi et al. 2018), via Natural Instructions (Apache 2.0)",
    "disfl_qa": "CC BY 4.0 (Disfl-QA, Google; contexts from SQuAD v2, CC BY-SA 4.0)",
    "quoref": "CC BY 4.0 (Quoref, AllenAI), via Natural Instructions (Apache 2.0)",
    "drop": "CC BY-SA 4.0 (DROP, AllenAI), via Natural Instructions (Apache 2.0)",
    "cosmosqa": "CC BY 4.0 (Cosmos QA, AllenAI), via Natural Instructions (Apache 2.0)",
    "hindi": "Apache 2.0 (BIG-bench hindi_question_answering; contexts from Hindi Wikipedia, CC BY-SA)",
    "parsinlu": "CC BY-NC-SA 4.0 (ParsiNLU, Khashabi et al. 2021): non-commercial",
}


@dataclass
class Example:
    """One question over one document."""

    qid: str
    source: str
    query: str
    document: str
    evidence: list[tuple[int, int]]  # char spans in ``document`` the answer needs
    answers: list[str] = field(default_factory=list)  # answer strings (mined negatives must lack them)
    answerable: bool = True  # False: the document does not answer (every passage is a negative)
    passage_only: bool = False  # relevant document, sentences unlabeled

    @property
    def doc_key(self) -> str:
        """The document's identity across questions and sources (exact text)."""
        return hashlib.sha1(self.document.encode("utf-8")).hexdigest()[:16]


@dataclass
class SourceReport:
    questions: int = 0  # read from the task file
    kept: int = 0
    unmapped: int = 0  # the answer could not be found in the document (or was ambiguous)
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    @property
    def mapping_failure_rate(self) -> float:
        tried = self.kept + self.unmapped
        return self.unmapped / tried if tried else 0.0

    def to_dict(self) -> dict:
        return {
            "questions": self.questions,
            "kept": self.kept,
            "unmapped": self.unmapped,
            "mapping_failure_rate": round(self.mapping_failure_rate, 4),
            "skipped": self.skipped,
        }


def fetch_task(source: str, cache_dir: Path | None = None, sdist: str | Path | None = None) -> Path:
    """The task file of ``source``, extracted from the bigbench sdist once (``sdist``: a copy of it,
    :func:`.bigbench.locate_sdist`)."""
    if source not in TASK_FILES:
        raise ValueError(f"unknown source {source!r}; choose from {', '.join(TASK_FILES)}")
    name = TASK_FILES[source]
    if any(r in name for r in RESERVED_TASKS):  # a guard against a future edit of TASK_FILES
        raise ValueError(f"{name} is reserved for an outside evaluation and is never read")
    target = Path(cache_dir or default_cache_dir()) / "bigbench_tasks" / name
    if not target.is_file():
        extract({name: target}, cache_dir, sdist)
    return target


def load_source(
    source: str,
    path: str | Path | None = None,
    cache_dir: Path | None = None,
    sdist: str | Path | None = None,
):
    """``(examples, report)`` of one source (``path``: a task.json of that source's format; else
    the sdist's, ``sdist`` as :func:`fetch_task` takes it)."""
    path = Path(path) if path is not None else fetch_task(source, cache_dir, sdist)
    examples = json.loads(path.read_text(encoding="utf-8"))["examples"]
    report = SourceReport(questions=len(examples))
    out: list[Example] = []
    convert = CONVERTERS[source]
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(examples):
        ex = convert(raw, f"{source}:{i}", report)
        if ex is None:
            continue
        if (ex.query, ex.document) in seen:  # Natural Instructions repeats a question per answer
            report.skip("duplicate question")
            continue
        seen.add((ex.query, ex.document))
        report.kept += 1
        out.append(ex)
    return out, report


# ---------------------------------------------------------------------- answer strings -> spans
def _target(raw: dict) -> str:
    t = raw.get("target")
    t = t[0] if isinstance(t, list) and t else t
    return str(t or "").strip()


def _strip_period(answer: str) -> str:
    """Natural Instructions targets end with a period the passage does not have ("Catherine.")."""
    return answer[:-1].rstrip() if answer.endswith(".") and not answer.endswith("..") else answer


def find_all(text: str, answer: str, whole_word: bool = False) -> list[tuple[int, int]]:
    """Char spans of every occurrence of ``answer`` in ``text`` (case-sensitive; with
    ``whole_word``, not inside a longer word or number)."""
    if not answer:
        return []
    pattern = re.escape(answer)
    if answer not in text:  # tokenized text spaces out punctuation: "40 , 000" for "40,000"
        pattern = r"\s*".join(re.escape(t) for t in re.findall(r"\w+|[^\w\s]", answer))
    if whole_word:
        pattern = rf"(?<![\w.,]){pattern}(?![\w]|[.,]\d)"
    return [(m.start(), m.end()) for m in re.finditer(pattern, text)]


def _labeled(qid, source, query, doc, answer, report, whole_word=False, max_hits=None, fact=False):
    spans = find_all(doc, answer, whole_word)
    if not spans or (max_hits is not None and len(spans) > max_hits):
        report.unmapped += 1
        return None
    return Example(qid, source, query, doc, evidence_sentences(query, doc, spans, fact), [answer])


def evidence_sentences(
    query: str, doc: str, hits: list[tuple[int, int]], fact: bool = False
) -> list[tuple[int, int]]:
    """The sentence spans an answer needs: the sentence of the answer occurrence whose sentence
    shares the most content words with the query (a name that recurs through a story is not
    evidence everywhere it occurs). With ``fact`` (coreference questions: "the last name of the
    person who ..."): the sentence that shares the most words with the query (the fact the
    question describes) and, when it lacks the answer, the answer's mention nearest to it."""
    from pruner_model.core.segmentation import segment
    from pruner_model.core.text import content_words

    units = segment(doc)
    q = content_words(query)

    def overlap(u) -> int:
        return len(q & content_words(u.text_of(doc)))

    holding = [u for u in units if any(u.start < e and s < u.end for s, e in hits)]
    if not holding:
        return list(hits)
    best = max(holding, key=overlap)  # first of the ties: the earliest mention
    chosen = {(best.start, best.end)}
    if fact and units:
        top = max(units, key=overlap)
        if overlap(top) > overlap(best):  # the fact, and the mention of the answer nearest to it
            near = min(holding, key=lambda u: (abs(u.start - top.start), u.start > top.start))
            chosen = {(top.start, top.end), (near.start, near.end)}
    return sorted(chosen)


def _between(text: str, start: str, end: str | None) -> str | None:
    i = text.find(start)
    if i < 0:
        return None
    i += len(start)
    j = text.find(end, i) if end else len(text)
    return text[i : j if j >= 0 else len(text)].strip()


def _parse(raw: dict, report: SourceReport, doc_marks: tuple, query_marks: tuple) -> tuple[str, str] | None:
    """``(document, query)`` cut out of the task input between their ``(start, end)`` markers;
    None, counted as unparsed, when either is missing or empty."""
    doc, query = _between(raw["input"], *doc_marks), _between(raw["input"], *query_marks)
    if not doc or not query:
        report.skip("unparsed")
        return None
    return doc, query


# ---------------------------------------------------------------------- converters
def convert_nq(raw: dict, qid: str, report: SourceReport) -> Example | None:
    parsed = _parse(raw, report, ("Context:", None), ("Question:", "\nContext:"))
    if parsed is None:
        return None
    doc, query = parsed
    ex = _labeled(qid, "nq", query, doc, _target(raw), report)
    if ex is not None:  # the original answer too: a passage that holds it answers the question
        ex.answers += [a for a in raw.get("target_scores", {}) if a and a not in ex.answers]
    return ex


_SENT = re.compile(r"Sent (\d+): ")


def convert_multirc(raw: dict, qid: str, report: SourceReport) -> Example | None:
    parsed = _parse(raw, report, ("Paragraph- ", "\nQuestion:"), ("\nQuestion:", None))
    if parsed is None:
        return None
    para, query = parsed
    query = re.sub(r"\?\.$", "?", query)
    pieces = _SENT.split(para)  # ['', '1', 'text', '2', 'text', ...]
    doc, spans_by_no = "", {}
    for no, sent in zip(pieces[1::2], pieces[2::2]):
        sent = sent.strip()
        if doc:
            doc += " "
        spans_by_no[int(no)] = (len(doc), len(doc) + len(sent))
        doc += sent
    needed = [int(n) for n in re.findall(r"\d+", _target(raw))]
    if not needed or any(n not in spans_by_no for n in needed):
        report.unmapped += 1
        return None
    return Example(qid, "multirc", query, doc, sorted(spans_by_no[n] for n in set(needed)))


def convert_disfl_qa(raw: dict, qid: str, report: SourceReport) -> Example | None:
    parsed = _parse(raw, report, ("\ncontext:", None), ("", "\ncontext:"))
    if parsed is None:
        return None
    doc, query = parsed
    answer = _target(raw)
    if answer == "unknown":
        return Example(qid, "disfl_qa", query, doc, [], answerable=False)
    return _labeled(qid, "disfl_qa", query, doc, answer, report)


def convert_quoref(raw: dict, qid: str, report: SourceReport) -> Example | None:
    parsed = _parse(raw, report, ("Passage:", "\nQuestion:"), ("\nQuestion:", None))
    if parsed is None:
        return None
    doc, query = parsed
    return _labeled(qid, "quoref", query, doc, _strip_period(_target(raw)), report, fact=True)


_ARITHMETIC = re.compile(
    r"\b(how many (more|fewer|less|total|times|in all)|difference|combined|altogether|in total|"
    r"total|sum|both|average|percent|longer|shorter|more than|less than)\b",
    re.IGNORECASE,
)


def convert_drop(raw: dict, qid: str, report: SourceReport) -> Example | None:
    parsed = _parse(raw, report, ("Passage:", "\nQuestion:"), ("\nQuestion:", "\nAnswer type:"))
    if parsed is None:
        return None
    doc, query = parsed
    if _ARITHMETIC.search(query):
        report.skip("arithmetic question")
        return None
    kind = _between(raw["input"], "\nAnswer type:", None) or ""
    if kind.startswith("Number") and "yard" not in query.lower():  # counts: "How many field goals
        report.skip("count question")  # did he kick?" needs every goal's sentence, not the "2"
        return None
    return _labeled(qid, "drop", query, doc, _strip_period(_target(raw)), report, whole_word=True, max_hits=1)


def convert_cosmosqa(raw: dict, qid: str, report: SourceReport) -> Example | None:
    parsed = _parse(raw, report, ("Context:", "\nQuestion:"), ("\nQuestion:", None))
    if parsed is None:
        return None
    doc, query = parsed
    return Example(qid, "cosmosqa", query, doc, [], passage_only=True)


def convert_hindi(raw: dict, qid: str, report: SourceReport) -> Example | None:
    text = str(raw.get("input", "")).strip()
    cut = max(text.rfind(mark, 0, len(text) - 1) for mark in "।.?!")  # the question: the last sentence
    doc, query = text[: cut + 1].strip(), text[cut + 1 :].strip()
    if cut < 0 or not doc or not query:
        report.skip("unparsed")
        return None
    return _labeled(qid, "hindi", query, doc, _target(raw), report)


def convert_parsinlu(raw: dict, qid: str, report: SourceReport) -> Example | None:
    parsed = _parse(raw, report, ("passage: '", "' question: '"), ("' question: '", None))
    if parsed is None:
        return None
    doc, query = parsed
    query = query.removesuffix("'").strip()
    answers = [str(a).strip() for a in raw.get("target") or [] if str(a).strip()]
    spans = sorted(
        {s for a in answers for s in evidence_sentences(query, doc, find_all(doc, a)) if find_all(doc, a)}
    )
    if not spans:
        report.unmapped += 1
        return None
    return Example(qid, "parsinlu", query, doc, spans, answers)


CONVERTERS: dict[str, Callable[[dict, str, SourceReport], Example | None]] = {
    "nq": convert_nq,
    "multirc": convert_multirc,
    "disfl_qa": convert_disfl_qa,
    "quoref": convert_quoref,
    "drop": convert_drop,
    "cosmosqa": convert_cosmosqa,
    "hindi": convert_hindi,
    "parsinlu": convert_parsinlu,
}
