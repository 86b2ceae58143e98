"""A user's documents as a retriever would hold them: read from a folder of ``.txt`` / ``.md`` /
``.html`` files or a JSONL of ``{id, title, text}`` documents, and cut into chunks of whole
sentences (``words`` per chunk at most, ``overlap`` sentences repeated at the start of the next
chunk, a markdown heading always opening a chunk, markdown lines kept as they are), or kept as the
user's own chunks (``words=0``).

HTML becomes text with its structure in markdown form: headings as ``#`` lines, list items as
``-`` lines, paragraphs and table rows on lines of their own, scripts and styles dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from pruner_model.core.records import canonical_id, check_unique_ids, iter_jsonl, read_text
from pruner_model.core.segmentation import segment

SUFFIXES = {".txt": "text", ".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html"}


@dataclass(frozen=True)
class Document:
    id: str
    title: str | None
    text: str


@dataclass(frozen=True)
class ChunkSettings:
    words: int = 150  # at most this many words a chunk (a longer sentence is a chunk of its own); 0: as is
    overlap: int = 1  # sentences of a chunk repeated at the start of the next one

    def check(self) -> None:
        if self.words != 0 and self.words < 10:
            raise ValueError(
                f"--chunk-words must be 0 (the documents as they are) or >= 10, got {self.words}"
            )
        if self.overlap < 0:
            raise ValueError(f"--chunk-overlap must be >= 0, got {self.overlap}")


class _HtmlText(HTMLParser):
    """Text of an HTML page with markdown-style structure (see the module's docstring)."""

    BLOCKS = {"p", "div", "section", "article", "br", "table", "ul", "ol", "blockquote", "pre", "hr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.title: list[str] = []
        self.in_title = False

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "noscript", "template"):
            self.skip += 1
        elif tag == "title":
            self.in_title = True
        elif re.fullmatch(r"h[1-6]", tag):
            self.parts.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag == "li":
            self.parts.append("\n- ")
        elif tag in ("td", "th"):
            self.parts.append(" ")
        elif tag == "tr":
            self.parts.append("\n|")
        elif tag in self.BLOCKS:
            self.parts.append("\n" if tag == "br" else "\n\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style", "noscript", "template"):
            self.skip = max(0, self.skip - 1)
        elif tag == "title":
            self.in_title = False
        elif tag in ("td", "th"):
            self.parts.append(" |")
        elif tag == "tr":
            pass
        elif re.fullmatch(r"h[1-6]", tag) or tag in self.BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data):
        if self.skip:
            return
        if self.in_title:
            self.title.append(data)
            return
        self.parts.append(re.sub(r"\s+", " ", data))


def html_to_text(html: str) -> tuple[str | None, str]:
    """``(title, text)`` of an HTML page: the ``<title>`` (None without one) and its text."""
    parser = _HtmlText()
    parser.feed(html)
    parser.close()
    lines = [line.strip() for line in "".join(parser.parts).split("\n")]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    title = " ".join("".join(parser.title).split()) or None
    return title, text


def _title_of(text: str, fallback: str) -> str:
    """A markdown or text file's title: its first heading, else its file name."""
    for line in text.splitlines()[:20]:
        if m := re.match(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$", line):
            return m.group(1)
    return fallback


def read_corpus(path: str | Path) -> list[Document]:
    """The documents under ``path``: a folder (its ``.txt``, ``.md`` and ``.html`` files, recursively,
    in name order; id = the path inside the folder) or a ``.jsonl`` file of ``{id, title, text}``.
    Empty documents are left out; a malformed line or an unreadable file is a one-line error."""
    path = Path(path)
    docs: list[Document] = []
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES):
            raw = read_text(f)
            rel = f.relative_to(path).as_posix()
            if SUFFIXES[f.suffix.lower()] == "html":
                title, text = html_to_text(raw)
                title = title or _title_of(text, f.stem)
            else:
                text, title = raw.strip(), _title_of(raw, f.stem)
            if text:
                docs.append(Document(rel, title, text))
        if not docs:
            raise ValueError(f"{path}: no .txt, .md or .html documents with text")
        return docs
    if not path.is_file():
        raise ValueError(f"{path}: no such folder or file")
    ids = []
    for i, rec in enumerate(iter_jsonl(path), 1):
        where = f"{path}:{i}"
        if not isinstance(rec.get("text"), str):
            raise ValueError(f"{where}: expected {{id, title, text}} with a 'text' string")
        if rec.get("title") is not None and not isinstance(rec["title"], str):
            raise ValueError(f"{where}: 'title' must be a string")
        doc_id = canonical_id(rec.get("id", i), where)
        ids.append((doc_id, f"line {i}"))
        if rec["text"].strip():
            docs.append(Document(doc_id, rec.get("title"), rec["text"].strip()))
    check_unique_ids(ids)
    if not docs:
        raise ValueError(f"{path}: no documents with text")
    return docs


def chunk_spans(text: str, settings: ChunkSettings) -> list[tuple[int, int]]:
    """Character ranges of ``text``'s chunks (see the module's docstring)."""
    units = segment(text)
    if settings.words == 0 or not units:
        return [(0, len(text))] if text.strip() else []
    sizes = [len(u.text_of(text).split()) for u in units]
    out: list[tuple[int, int]] = []
    first = 0
    while first < len(units):
        last, count = first, sizes[first]
        while (
            last + 1 < len(units)
            and count + sizes[last + 1] <= settings.words
            and units[last + 1].kind != "heading"
        ):
            last += 1
            count += sizes[last]
        out.append((units[first].start, units[last].end))
        if last + 1 >= len(units):
            break
        # the next chunk repeats up to ``overlap`` sentences, never a heading, always moving on
        nxt = last + 1
        if units[nxt].kind != "heading":
            nxt = max(first + 1, last + 1 - settings.overlap)
            while nxt <= last and units[nxt].kind == "heading":
                nxt += 1
        first = nxt
    return out


def chunk_corpus(docs: list[Document], settings: ChunkSettings) -> list[dict]:
    """Every document's chunks as passages ``{id, title, text, document}`` (id ``<document>#<k>``)."""
    out = []
    for d in docs:
        for k, (s, e) in enumerate(chunk_spans(d.text, settings)):
            out.append({"id": f"{d.id}#{k}", "title": d.title, "text": d.text[s:e], "document": d.id})
    return out
