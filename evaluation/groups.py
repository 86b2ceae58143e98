"""Labeled query groups: one query with its labeled passages, cut into the units every part
scores, and the one seeded slicing of dev groups that training, calibration, `pruner evaluate`
and the benchmarks share.

A labeled record (see the records format) belongs to the group named by ``meta.group`` when
present (what `pruner annotate` writes), else by its id up to the first ``/``
(``"q17/d3#2"`` → ``"q17"``, what `pruner data` writes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from pruner_model.core.alignment import unit_bounds, unit_labels
from pruner_model.core.segmentation import Unit, segment
from pruner_model.core.text import STOP_WORDS, content_words, words  # noqa: F401  (re-exported)


def group_of(record: dict) -> str:
    """Query-group id of a labeled record.

    >>> group_of({"id": "q17/d3#2"}), group_of({"id": "docs/faq-1/a", "meta": {"group": "docs/faq-1"}})
    ('q17', 'docs/faq-1')
    """
    meta = record.get("meta")
    if isinstance(meta, dict) and meta.get("group") is not None:
        return str(meta["group"])
    return str(record["id"]).split("/", 1)[0]


def source_of(record: dict) -> str:
    """The source a record came from (``source`` as `pruner data` writes it; ``user`` without)."""
    return str(record.get("source") or (record.get("meta") or {}).get("source") or "user")


def records_by_source(records: Iterable[dict]) -> dict[str, list[dict]]:
    """``records`` by :func:`source_of`, each source's in input order."""
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(source_of(r), []).append(r)
    return out


def passage_id_of(record: dict) -> str:
    """The passage part of a labeled record's id (after its group id and ``/``)."""
    rid, gid = str(record["id"]), group_of(record)
    return rid[len(gid) + 1 :] if rid.startswith(gid + "/") else rid


@dataclass
class LabeledGroup:
    """One query with its labeled passages, segmented as the model scores them."""

    id: str
    query: str
    passages: list[dict]  # {id, title, text, relevant_spans}
    units: list[list[Unit]]  # per passage
    labels: list[np.ndarray]  # per passage: [n_units] bool, the unit overlaps a relevant span
    words: list[np.ndarray]  # per passage: [n_units] words of each unit

    @property
    def bounds(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per passage, the ``(starts, ends)`` char offsets of its units."""
        return [unit_bounds(us) for us in self.units]

    @property
    def has_evidence(self) -> bool:
        return any(lab.any() for lab in self.labels)


def load_groups(
    records: Iterable[dict], language: str = "english", structure: bool = True
) -> list[LabeledGroup]:
    """Labeled records gathered into query groups, in order of first appearance."""
    by: dict[str, list[dict]] = {}
    for r in records:
        by.setdefault(group_of(r), []).append(r)
    out = []
    for gid, recs in by.items():
        passages, units, labels, wcount = [], [], [], []
        for r in recs:
            text = r["context"]
            us = segment(text, language, structure)
            passages.append(
                {
                    "id": passage_id_of(r),
                    "title": r.get("title"),
                    "text": text,
                    "relevant_spans": r["relevant_spans"],
                    "role": (r.get("meta") or {}).get("role"),
                }
            )
            units.append(us)
            labels.append(unit_labels(us, r["relevant_spans"]))
            wcount.append(np.array([len(words(u.text_of(text))) for u in us], dtype=np.int64))
        out.append(LabeledGroup(gid, recs[0]["query"], passages, units, labels, wcount))
    return out


def range_ids(ids: Iterable[str], seed: int, start: int = 0, stop: int | None = None) -> set[str]:
    """Ids ``start:stop`` of a seeded permutation of the sorted distinct ``ids``."""
    ids = sorted(set(ids))
    perm = np.random.default_rng(seed).permutation(len(ids))
    return {ids[i] for i in perm[start:stop]}


def range_groups(groups: list[LabeledGroup], seed: int, start: int = 0, stop: int | None = None):
    """Groups ``start:stop`` of a seeded permutation of the sorted group ids, in their input order.

    Calibration takes the head of the permutation and reports take a later, disjoint range, so
    a reported number is never measured on the groups it was calibrated on. Every part slices
    dev data through this function: the same ``seed`` gives the same groups everywhere.
    """
    keep = range_ids((g.id for g in groups), seed, start, stop)
    return [g for g in groups if g.id in keep]


def range_records(records: list[dict], seed: int, start: int = 0, stop: int | None = None) -> list[dict]:
    """The records of the groups :func:`range_groups` would pick, in their input order."""
    keep = range_ids((group_of(r) for r in records), seed, start, stop)
    return [r for r in records if group_of(r) in keep]


def load_range(
    records: list[dict],
    seed: int,
    start: int = 0,
    stop: int | None = None,
    language: str = "english",
    structure: bool = True,
) -> list[LabeledGroup]:
    """:func:`load_groups` of only the groups :func:`range_groups` would pick (segments nothing
    else, so slicing a large dev file stays cheap)."""
    return load_groups(range_records(records, seed, start, stop), language, structure)
