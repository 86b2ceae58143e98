"""Shifted evaluation slices built from labeled dev records: how a pruner does on text it was
not tuned on, before a user's own corpus shows it.

* ``mined``: each question's gold passage with retriever-style distractors: the 2 paragraphs
  nearest to it by TF-IDF cosine across the whole split (other articles only, so not the
  same-article neighbours the training groups use), 2 random ones; 15% of questions lose their
  gold passage (replaced by the next nearest).
* ``low_overlap``: questions whose answer sentences share at most one content word with the
  question (word overlap does not find them).
* ``noisy``: user-generated-looking text: passages lower-cased, about half the punctuation
  removed, light typos (adjacent letters swapped, a letter dropped); queries lower-cased.
  Relevant spans are mapped through every edit.

Every slice labels the sentences of *every* annotator's answer (``meta.answers`` written by
`pruner data squad`), so a question counts as preserved only when all of them are kept. Records
without ``meta.answers`` fall back to their ``relevant_spans``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

import numpy as np
from pruner_model.core.retrieval import TfidfIndex
from pruner_model.core.segmentation import segment
from pruner_model.evaluation.groups import content_words, group_of, passage_id_of
from pruner_model.evaluation.textnoise import noisy_record

SLICES = ("as_is", "mined", "low_overlap", "noisy")


def _answer_spans(record: dict) -> list[list[int]]:
    """Sentences holding any annotator's answer (else the record's own spans)."""
    answers = (record.get("meta") or {}).get("answers") or []
    if not answers:
        return [list(s) for s in record["relevant_spans"]]
    spans: list[list[int]] = []
    for u in segment(record["context"]):
        if any(u.start < e and u.end > s for s, e in answers) and [u.start, u.end] not in spans:
            spans.append([u.start, u.end])
    return spans


def _groups(records: list[dict]) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = {}
    for r in records:
        by.setdefault(group_of(r), []).append(r)
    return by


def _relabel(records: list[dict]) -> list[dict]:
    return [{**r, "relevant_spans": _answer_spans(r)} for r in records]


def as_is(records: list[dict], seed: int = 0) -> list[dict]:
    """The records with every annotator's answer sentences labeled."""
    return _relabel(records)


def shares_few_words(query: str, answers: Iterable[str], max_shared: int = 1) -> bool:
    """Whether the ``answers`` (relevant sentence texts) have content words and share at most
    ``max_shared`` of them with ``query``: the ``low_overlap`` criterion."""
    answer_words = {w for a in answers for w in content_words(a)}
    return bool(answer_words) and len(content_words(query) & answer_words) <= max_shared


def low_overlap_groups(records: list[dict], max_shared: int = 1) -> set[str]:
    """Ids of the groups whose ``relevant_spans`` share at most ``max_shared`` content words with
    the query (:func:`shares_few_words`), as the records label them."""
    return {
        gid
        for gid, recs in _groups(records).items()
        if shares_few_words(
            recs[0]["query"], (r["context"][s:e] for r in recs for s, e in r["relevant_spans"]), max_shared
        )
    }


def low_overlap(records: list[dict], seed: int = 0, max_shared: int = 1) -> list[dict]:
    """Groups whose relevant sentences share at most ``max_shared`` content words with the query."""
    groups = _groups(_relabel(records))
    keep = low_overlap_groups([r for recs in groups.values() for r in recs], max_shared)
    return [r for gid, recs in groups.items() if gid in keep for r in recs]


def mined(
    records: list[dict],
    seed: int = 0,
    keep: set[str] | None = None,
    nearest: int = 2,
    random_k: int = 2,
    no_gold: float = 0.15,
) -> list[dict]:
    """Groups rebuilt around each gold passage with TF-IDF-nearest distractors (see module doc);
    every paragraph of ``records`` is a candidate, groups are built for the ids in ``keep``."""
    rng = random.Random(seed)
    paragraphs: dict[str, dict] = {}  # passage id -> a record holding it
    for r in records:
        paragraphs.setdefault(passage_id_of(r), r)
    pids = sorted(paragraphs)
    article = np.array([p.rsplit(":", 1)[0] for p in pids])  # "nyt:480:1" -> "nyt:480"
    index = TfidfIndex([paragraphs[p]["context"] for p in pids])
    position = {p: i for i, p in enumerate(pids)}
    out = []
    for gid, recs in _groups(records).items():
        gold = next((r for r in recs if r["relevant_spans"]), None)
        if gold is None or (keep is not None and gid not in keep):
            continue
        gi = position[passage_id_of(gold)]
        near = [pids[j] for j in index.nearest(gi, nearest + 1, exclude=article == article[gi])]
        others = [
            p for p in rng.sample(pids, min(len(pids), 4 * random_k + 8)) if p not in near and p != pids[gi]
        ]
        has_gold = rng.random() >= no_gold or len(near) <= nearest
        members = ([pids[gi]] if has_gold else [near[nearest]]) + near[:nearest] + others[:random_k]
        rng.shuffle(members)
        role = {p: "random" for p in others[:random_k]} | {p: "mined" for p in near} | {pids[gi]: "gold"}
        for p in members:
            src = paragraphs[p]
            out.append(
                {
                    "id": f"{gid}/{p}",
                    "query": gold["query"],
                    "title": src.get("title"),
                    "context": src["context"],
                    "relevant_spans": _answer_spans(gold) if p == pids[gi] else [],
                    "source": "shift:mined",
                    "meta": {"group": gid, "role": role[p]},
                }
            )
    return out


def noisy(records: list[dict], seed: int = 0) -> list[dict]:
    """The records as user-generated-looking text (see module doc), spans mapped."""
    return [noisy_record(r, random.Random(f"{seed}:{r['id']}")) for r in _relabel(records)]


BUILDERS: dict[str, Callable[..., list[dict]]] = {
    "as_is": as_is,
    "mined": mined,
    "low_overlap": low_overlap,
    "noisy": noisy,
}


def shift_parts(name: str) -> list[str]:
    """The shifts a slice name applies, in the order they are applied: one of :data:`SLICES`, or
    several shifts joined by ``+`` (``mined+noisy``: retriever-mined distractors, then noisy text,
    closer to a retriever over user-generated text than either alone). Shifts compose in the
    order mined, low_overlap, noisy whatever order the name gives; ``as_is`` stands alone.

    >>> shift_parts("noisy+mined")
    ['mined', 'noisy']
    """
    parts = name.split("+")
    for part in parts:
        if part not in BUILDERS:
            raise ValueError(
                f"unknown slice {part!r} in {name!r} (choose from {', '.join(SLICES)}, "
                "or join shifts with '+', e.g. mined+noisy)"
            )
    if len(parts) > 1 and "as_is" in parts:
        raise ValueError(f"slice {name!r}: as_is cannot be combined with other shifts")
    if len(set(parts)) < len(parts):
        raise ValueError(f"slice {name!r} names a shift twice")
    return sorted(parts, key=SLICES.index)


def build_shift(name: str, records: list[dict], seed: int = 0, keep: set[str] | None = None) -> list[dict]:
    """The labeled records of slice ``name`` (see :func:`shift_parts`) built from the groups of
    ``records`` whose ids are in ``keep`` (all by default); ``mined`` draws its distractors from
    every paragraph of ``records``."""
    parts = shift_parts(name)
    if parts[0] == "mined":  # labels every answer itself; later shifts act on its groups
        records, parts = mined(records, seed=seed, keep=keep), parts[1:]
    elif keep is not None:
        records = [r for r in records if group_of(r) in keep]
    for part in parts:
        records = BUILDERS[part](records, seed=seed)
    return records
