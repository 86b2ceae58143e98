"""Query groups over one passage pool built from every source, the way a retriever hands them over.

Documents are cut into retriever-sized chunks (whole sentences, at most ``chunk_words`` words),
deduplicated by exact text across sources, and split by document into ``train``,
``calibration`` and ``dev`` (a document and all its questions land in one split; documents that
SQuAD training paragraphs also hold go to ``train``, so no dev passage was ever trained on).
Each question then gets a group of ``passages_per_group`` chunks of its own split:

- ``gold``: the chunks holding its evidence (none for answer-less questions);
- ``same_doc``: other chunks of its document (up to ``same_doc``);
- ``mined``: the chunks a TF-IDF retriever ranks highest for the question, from any source,
  that neither come from its document nor contain an answer string (up to ``mined``; up to
  ``train_mined`` in training groups, where look-alikes teach the ranking);
- ``random``: random chunks of any source, filling the group.

``no_gold_share`` of the answerable questions lose their gold chunks (the retriever missed),
and Disfl-QA's unanswerable questions never have one: groups where pruning everything is right.
Each record's ``meta.role`` names which of these it is, for the per-source diagnostics of
`pruner evaluate --by-source`; ``meta.document`` names the question's document, so that `pruner
adapt` keeps a document's questions (and their other chunks) in one split.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from dataclasses import dataclass

from pruner_model.annotation.sources import Example
from pruner_model.core.segmentation import segment

SPLITS = ("train", "calibration", "dev", "heldout")  # heldout: whole data sets never trained on


@dataclass
class Chunk:
    pid: str
    doc: str  # family of the document it was cut from (the first, when texts repeat)
    text: str
    start: int  # offset in the document
    end: int


def chunk_bounds(document: str, max_words: int) -> list[tuple[int, int]]:
    """Char ranges of consecutive whole sentences of at most ``max_words`` words each (a longer
    sentence is a chunk of its own)."""
    units = segment(document)
    if not units:
        return [(0, len(document))] if document.strip() else []
    out, start, count, prev_end = [], units[0].start, 0, units[0].end
    for u in units:
        n = len(u.text_of(document).split())
        if count and count + n > max_words:
            out.append((start, prev_end))
            start, count = u.start, 0
        count += n
        prev_end = u.end
    out.append((start, prev_end))
    return out


def normalized(text: str) -> str:
    """Lower-case letters and digits only: texts that differ in spacing and punctuation match."""
    return re.sub(r"[^0-9a-z]+", "", text.lower())


def family(document: str) -> str:
    """A document's near-duplicate family: versions of one paragraph that differ further on (Natural
    Questions contexts recur with another answer substituted) share a split and never face each
    other as negatives."""
    return hashlib.sha1(normalized(document)[:100].encode()).hexdigest()[:16]


def split_of(doc_key: str, seed: int, shares: tuple[float, float]) -> str:
    """``train`` / ``calibration`` / ``dev`` by a hash of the document (stable across runs)."""
    h = int(hashlib.sha1(f"{seed}:{doc_key}".encode()).hexdigest()[:8], 16) / 16**8
    return "calibration" if h < shares[0] else "dev" if h < shares[0] + shares[1] else "train"


@dataclass
class MixSettings:
    passages_per_group: int = 5
    same_doc: int = 1
    mined: int = 2
    train_mined: int | None = 3  # the training groups' mined passages (None: ``mined``)
    no_gold_share: float = 0.15
    chunk_words: int = 150
    calibration_share: float = 0.1
    dev_share: float = 0.1
    max_questions: dict[str, int | None] | None = None  # per split: questions per source (None = all)
    seed: int = 0
    heldout_sources: frozenset[str] = frozenset()  # sources whose every document goes to ``heldout``

    def __post_init__(self) -> None:
        if self.passages_per_group < 1:
            raise ValueError("passages per group must be >= 1")
        if min(self.same_doc, self.mined, self.mined_in("train")) < 0:
            raise ValueError("same-doc and mined passages must be >= 0")
        if not 0 <= self.no_gold_share <= 1:
            raise ValueError("the no-gold share must be in [0, 1]")
        if self.chunk_words < 10:
            raise ValueError("chunk words must be >= 10")
        if not (
            0 < self.calibration_share and 0 < self.dev_share and self.calibration_share + self.dev_share < 1
        ):
            raise ValueError("calibration and dev shares must be > 0 and sum to < 1")

    def mined_in(self, split: str) -> int:
        """Mined passages a group of ``split`` takes: ``train_mined`` in training (hard negatives
        teach ranking), ``mined`` where groups stand for what a retriever hands over."""
        return self.train_mined if split == "train" and self.train_mined is not None else self.mined


# over 60 lines: one pass over the questions of a split, sharing its pool, index and sampling state
def build_mix(
    examples: list[Example], settings: MixSettings, train_texts: set[str] = frozenset(), progress=None
) -> tuple[dict[str, list[dict]], dict[str, list[dict]], dict]:
    """``(records, groups, stats)`` per split for ``examples`` of every source
    (``train_texts``: normalized texts, e.g. SQuAD training paragraphs, whose documents must be
    trained on)."""
    from pruner_model.core.retrieval import TfidfIndex

    s = settings
    shares = (s.calibration_share, s.dev_share)
    pool: dict[str, list[Chunk]] = {k: [] for k in SPLITS}
    by_text: dict[str, Chunk] = {}
    doc_chunks: dict[str, list[Chunk]] = {}
    doc_split: dict[str, str] = {}
    stats: dict = {"duplicate_chunks": 0}
    trained = {family(ex.document) for ex in examples if normalized(ex.document) in train_texts}
    # a document a training set also holds (the same Wikipedia article in two sets) is split as
    # that set's: its held-out questions are dropped, never trained on (stats["heldout_shared"])
    shared = {ex.doc_key for ex in examples if ex.source not in s.heldout_sources}
    stats["heldout_shared"] = sum(ex.source in s.heldout_sources and ex.doc_key in shared for ex in examples)
    # a translation (XQuAD) is split with the SQuAD article it translates; a held-out one whose
    # article is trained or calibrated on is dropped (stats["heldout_translated"])
    origin = _translation_origins(examples, s)

    def split_by(fam: str) -> str:
        return "train" if fam in trained else split_of(fam, s.seed, shares)

    def unseen(ex) -> bool:  # not a translation of an article trained or calibrated on
        return ex.doc_key not in origin or split_by(origin[ex.doc_key]) == "dev"

    stats["heldout_translated"] = sum(ex.source in s.heldout_sources and not unseen(ex) for ex in examples)
    for ex in examples:
        if ex.doc_key in doc_chunks:
            continue
        fam = family(ex.document)
        if ex.source in s.heldout_sources and ex.doc_key not in shared and unseen(ex):
            split = "heldout"
        else:
            split = split_by(origin.get(ex.doc_key, fam))
        doc_split[ex.doc_key] = split
        chunks = []
        for k, (a, b) in enumerate(chunk_bounds(ex.document, s.chunk_words)):
            text = ex.document[a:b]
            key = hashlib.sha1(text.encode()).hexdigest()
            if key in by_text:  # the same text from another document: one passage
                stats["duplicate_chunks"] += 1
                chunks.append(Chunk(by_text[key].pid, fam, text, a, b))
                continue
            c = Chunk(f"{ex.source}:{ex.doc_key[:10]}:{k}", fam, text, a, b)
            by_text[key] = c
            pool[split].append(c)
            chunks.append(c)
        doc_chunks[ex.doc_key] = chunks
    records: dict[str, list[dict]] = {k: [] for k in SPLITS}
    groups: dict[str, list[dict]] = {k: [] for k in SPLITS}
    roles: Counter = Counter()
    for split in SPLITS:
        rng = random.Random(f"{s.seed}:{split}")
        chosen = _questions(examples, doc_split, split, s, rng)
        if not chosen or not pool[split]:
            continue
        index = TfidfIndex([c.text for c in pool[split]])
        n_mined = s.mined_in(split)
        candidates = index.search([ex.query for ex in chosen], k=8 * max(1, n_mined) + 8)
        for ex, cand in zip(chosen, candidates):
            members = _members(ex, doc_chunks[ex.doc_key], pool[split], cand, s, n_mined, rng)
            rng.shuffle(members)
            for chunk, role, spans in members:
                roles[(split, role)] += 1
                # the question's document: `pruner adapt` keeps a document's questions in one split
                meta = {"role": role, "document": f"{ex.source}:{ex.doc_key[:10]}"}
                if ex.passage_only and role == "gold":
                    meta["passage_only"] = True
                records[split].append(
                    {
                        "id": f"{ex.qid}/{chunk.pid}",
                        "query": ex.query,
                        "title": "",
                        "context": chunk.text,
                        "relevant_spans": spans,
                        "source": ex.source,
                        "meta": meta,
                    }
                )
            groups[split].append(
                {
                    "id": ex.qid,
                    "query": ex.query,
                    "passages": [{"id": c.pid, "title": "", "text": c.text} for c, _, _ in members],
                }
            )
            if progress is not None:
                progress.update(1)
    stats["pool"] = {k: len(v) for k, v in pool.items()}
    stats["roles"] = {
        split: {r: n for (sp, r), n in sorted(roles.items()) if sp == split} for split in SPLITS
    }
    return records, groups, stats


def _translation_origins(examples, s: MixSettings) -> dict[str, str]:
    """The family of the SQuAD article each XQuAD document translates (XQuAD keeps SQuAD's question
    ids), by the translation's ``doc_key``; empty where SQuAD is not built or is held out."""
    if "squad" in s.heldout_sources:
        return {}
    article = {ex.qid.split(":", 1)[1]: family(ex.document) for ex in examples if ex.source == "squad"}
    return {
        ex.doc_key: article[q]
        for ex in examples
        if ex.source.startswith("xquad_") and (q := ex.qid.split(":", 1)[1]) in article
    }


def _questions(examples, doc_split, split, s: MixSettings, rng) -> list[Example]:
    """The split's questions, at most ``max_questions[split]`` per source (a seeded sample)."""
    cap = (s.max_questions or {}).get(split)
    by_source: dict[str, list[Example]] = {}
    for ex in examples:
        if doc_split[ex.doc_key] == split and (split == "heldout") == (ex.source in s.heldout_sources):
            by_source.setdefault(ex.source, []).append(ex)
    out = []
    for src in sorted(by_source):
        qs = by_source[src]
        out += qs if cap is None or len(qs) <= cap else rng.sample(qs, cap)
    return out


def _members(
    ex: Example, own: list[Chunk], pool: list[Chunk], cand: list[int], s: MixSettings, n_mined: int, rng
):
    """``[(chunk, role, relevant_spans in chunk coordinates)]`` of one question's group, with up to
    ``n_mined`` mined passages."""
    fam = own[0].doc if own else family(ex.document)
    gold = []
    if ex.answerable:
        for c in own:
            spans = [
                [max(a, c.start) - c.start, min(b, c.end) - c.start]
                for a, b in ex.evidence
                if a < c.end and b > c.start
            ]
            if ex.passage_only or spans:
                gold.append((c, "gold", [] if ex.passage_only else spans))
    if gold and rng.random() < s.no_gold_share:
        gold = []  # the retriever missed: nothing in this group answers
    gold_ids = {c.pid for c, _, _ in gold}
    others = [c for c in own if c.pid not in gold_ids]
    members = gold[: s.passages_per_group]
    taken = {c.pid for c, _, _ in members}
    n_same = s.same_doc if ex.answerable else max(s.same_doc, 1)  # unanswerable: its own doc is the trap
    for c in rng.sample(others, min(n_same, len(others))):
        if len(members) < s.passages_per_group:
            members.append((c, "same_doc", []))
            taken.add(c.pid)
    answers = [a.lower() for a in ex.answers if a]
    families = {fam}  # one passage a family: near-duplicates are not two distractors
    mined = 0
    for j in cand:
        if mined >= n_mined or len(members) >= s.passages_per_group:
            break
        c = pool[j]
        if c.pid in taken or c.doc in families or any(a in c.text.lower() for a in answers):
            continue
        families.add(c.doc)
        members.append((c, "mined", []))
        taken.add(c.pid)
        mined += 1
    for _ in range(50 * s.passages_per_group):  # bounded: a tiny pool has few others
        if len(members) >= s.passages_per_group:
            break
        c = pool[rng.randrange(len(pool))]
        if c.pid in taken or c.doc in families or any(a in c.text.lower() for a in answers):
            continue
        families.add(c.doc)
        members.append((c, "random", []))
        taken.add(c.pid)
    return members
