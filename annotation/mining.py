"""From written (or logged) questions to the groups a retriever would hand over, and back from the
labeler's answers to the questions worth training on (``pruner adapt --corpus``).

* :func:`filter_questions` drops questions that copy their chunk's words (half or more of their
  word 4-grams stand in the chunk) and near-duplicates (content-word Jaccard >= 0.8, or the
  bi-encoder's cosine >= 0.95, with a question kept before), counting each filter's drops;
* :func:`build_groups` gives each question ``passages`` chunks of the user's corpus: its own chunk
  (at a seeded place, not first), the chunks BM25 and the bundled bi-encoder rank highest for it,
  and random chunks; for ``answerless_share`` of the questions none of its document's chunks (the
  retriever missed), and a logged query has no chunk of its own;
* :func:`confirm` keeps a written question only when the labeler found its evidence in the chunk
  it was written for (an ``unanswered`` question, a logged query or an answer-less group is kept as
  labeled), and writes each record's document and kind into its ``meta``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pruner_model.core.retrieval import BM25
from pruner_model.core.text import content_words, words


@dataclass(frozen=True)
class GroupSettings:
    passages: int = 5  # chunks a group
    bm25: int = 2  # of them mined by BM25
    dense: int = 1  # of them mined by the bi-encoder
    answerless_share: float = 0.15  # questions whose own document is left out of their group
    seed: int = 0

    def check(self) -> None:
        if self.passages < 1 or min(self.bm25, self.dense) < 0:
            raise ValueError("a group needs >= 1 passage and >= 0 mined ones")
        if not 0 <= self.answerless_share < 1:
            raise ValueError(f"--answerless-share must be in [0, 1), got {self.answerless_share}")


def _grams(text: str, n: int = 4) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def copies_chunk(question: str, chunk: str, share: float = 0.5) -> bool:
    """Half or more of the question's word 4-grams stand in the chunk (a sentence turned into a
    question, which teaches word matching rather than the user's phrasing)."""
    q = _grams(question)
    return bool(q) and len(q & _grams(chunk)) / len(q) >= share


def filter_questions(
    questions: list[dict], chunks: dict[str, dict], encoder=None
) -> tuple[list[dict], dict[str, int]]:
    """``questions`` (``{question, kind, chunk}``) less copies and near-duplicates, in order, and
    the number each filter dropped (``encoder``: a :class:`~pruner_model.core.biencoder.BiEncoder`
    for the cosine test; None: Jaccard only)."""
    dropped = {"copies its chunk": 0, "near-duplicate": 0}
    kept: list[dict] = []
    kept_words: list[set[str]] = []
    vectors = encoder.embed([q["question"] for q in questions]) if encoder is not None and questions else None
    kept_rows: list[int] = []
    for i, q in enumerate(questions):
        chunk = chunks.get(q.get("chunk"))
        if chunk is not None and copies_chunk(q["question"], chunk["text"]):
            dropped["copies its chunk"] += 1
            continue
        cw = content_words(q["question"])
        dup = any(len(cw & k) / max(1, len(cw | k)) >= 0.8 for k in kept_words)
        if not dup and vectors is not None and kept_rows:
            dup = float(np.max(vectors[kept_rows] @ vectors[i])) >= 0.95
        if dup:
            dropped["near-duplicate"] += 1
            continue
        kept.append(q)
        kept_words.append(cw)
        kept_rows.append(i)
    return kept, dropped


def _random_chunks(rng: random.Random, n: int, excluded: set[int], k: int) -> list[int]:
    """Up to ``k`` distinct random chunk indices below ``n`` outside ``excluded`` (drawn by
    rejection in a large corpus, from the list of the others in a small one)."""
    if n - len(excluded) <= 4 * k:
        free = [j for j in range(n) if j not in excluded]
        return rng.sample(free, min(len(free), k))
    out: list[int] = []
    while len(out) < k:
        j = rng.randrange(n)
        if j not in excluded and j not in out:
            out.append(j)
    return out


def _ranked(scores: np.ndarray, k: int) -> list[int]:
    return [int(j) for j in np.argsort(-scores, kind="stable")[:k]]


def _take(chosen: list[int], candidates, limit: int, barred: set[int], size: int) -> None:
    """Append up to ``limit`` of ``candidates`` to ``chosen`` (never one chosen or barred, never
    past ``size``)."""
    added = 0
    for j in candidates:
        if added >= limit or len(chosen) >= size:
            break
        if j not in chosen and j not in barred:
            chosen.append(j)
            added += 1


def build_groups(
    questions: list[dict], chunks: Sequence[dict], settings: GroupSettings, encoder=None, progress=None
) -> list[dict]:
    """Raw groups ``{id, query, passages: [{id, title, text}], meta: {document, kind, chunk,
    answerless}}`` for ``questions`` over ``chunks`` (see the module's docstring; ``encoder``:
    the bi-encoder for the dense candidates, None: BM25 alone)."""
    rng = random.Random(settings.seed)
    depth = settings.passages + 32  # candidates looked at: some are the question's own document
    lexical = BM25([words(c["text"]) for c in chunks]).search(
        [words(q["question"]) for q in questions], depth
    )
    dense = None
    if encoder is not None and settings.dense:
        c_vec = encoder.embed([c["text"] for c in chunks])
        dense = [_ranked(c_vec @ v, depth) for v in encoder.embed([q["question"] for q in questions])]
    index = {c["id"]: i for i, c in enumerate(chunks)}
    by_document: dict = {}
    for i, c in enumerate(chunks):
        by_document.setdefault(c.get("document"), set()).add(i)
    groups = []
    for n, q in enumerate(questions):
        own = index.get(q.get("chunk"))  # None: a logged query
        answerless = own is not None and rng.random() < settings.answerless_share
        barred = by_document.get(q.get("document"), set()) if answerless else set()
        chosen: list[int] = [own] if own is not None and not answerless else []
        _take(chosen, [j for j, _ in lexical[n]], settings.bm25, barred, settings.passages)
        if dense is not None:
            _take(chosen, dense[n], settings.dense, barred, settings.passages)
        free = _random_chunks(rng, len(chunks), barred | set(chosen), settings.passages)
        _take(chosen, free, settings.passages, barred, settings.passages)
        order = rng.sample(chosen, len(chosen))  # the answer's place is not a tell
        passages = [
            {"id": chunks[j]["id"], "title": chunks[j].get("title"), "text": chunks[j]["text"]} for j in order
        ]
        meta = {
            "document": q.get("document"),
            "kind": q.get("kind"),
            "chunk": q.get("chunk"),
            "answerless": answerless,
        }
        groups.append({"id": f"q{n}", "query": q["question"], "passages": passages, "meta": meta})
        if progress is not None:
            progress.update(1)
    return groups


def confirm(records: list[dict], groups: list[dict]) -> tuple[list[dict], dict[str, int]]:
    """The labeled records of the groups whose question is confirmed (see the module's docstring),
    each with ``meta.document`` and ``meta.kind``, and the counts: ``confirmed``, ``not answered by
    its chunk`` (dropped), ``kept as labeled``."""
    by_group: dict[str, list[dict]] = {}
    for r in records:
        by_group.setdefault(str((r.get("meta") or {}).get("group")), []).append(r)
    counts = {"confirmed": 0, "not answered by its chunk": 0, "kept as labeled": 0}
    out = []
    for g in groups:
        recs = by_group.get(str(g["id"]))
        if not recs:
            continue  # rejected by the labeler
        meta = g["meta"]
        own = meta.get("chunk")
        if meta.get("answerless") or own is None or meta.get("kind") == "unanswered":
            counts["kept as labeled"] += 1
        elif any(r["id"] == f"{g['id']}/{own}" and r.get("relevant_spans") for r in recs):
            counts["confirmed"] += 1
        else:
            counts["not answered by its chunk"] += 1
            continue
        doc = meta.get("document")
        for r in recs:
            out.append({**r, "meta": {**r["meta"], "document": doc, "kind": meta.get("kind")}})
    return out, counts
