"""One shape for a QA example from any source: a question over a document, with the document's
evidence as character spans (:class:`Example`), a count of what could not be labeled
(:class:`SourceReport`), and the helpers that turn answer strings into evidence sentences.
The readers of the public QA data sets (:mod:`.public_qa`) produce these; the retriever-style
groups are built from them (:mod:`.mix`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field


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


# ---------------------------------------------------------------------- answer strings -> spans
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
