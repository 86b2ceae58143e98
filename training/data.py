"""Labeled records → tokenized training windows, with a data report.

Records are read and validated line by line (a malformed line names its file and line), loaded
into a ``datasets.Dataset``, deduplicated on (query, context), subsampled by whole query groups,
and tokenized with :func:`pruner_model.encode_pairs`, so long contexts are windowed exactly as
inference windows them. Each window carries token labels from ``relevant_spans`` and a relevance
label (does the window hold a relevant token).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pruner_model.core.alignment import (
    IGNORE_INDEX,
    encode_pairs,
    span_labels,
    token_to_sentence,
    unit_bounds,
)
from pruner_model.core.records import RecordError, iter_jsonl, validate_labeled
from pruner_model.core.segmentation import segment
from pruner_model.evaluation.groups import group_of, records_by_source, source_of
from pruner_model.evaluation.shifts import low_overlap_groups
from pruner_model.evaluation.textnoise import noisy_record


@dataclass
class DataReport:
    files: list[str]
    records_read: int = 0
    records: int = 0
    positives: int = 0
    negatives: int = 0
    groups: int = 0
    duplicates_removed: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    windows: int = 0
    relevant_token_share: float = 0.0
    memory_mb: float = 0.0  # the tokenized windows in memory (Arrow buffers)
    low_overlap_groups: int | None = None  # counted when data.low_overlap_share draws them

    def line(self, name: str) -> str:
        dropped = ", ".join(f"{v} {k}" for k, v in self.dropped.items()) or "none"
        windows = (
            f", {self.windows} windows ({self.memory_mb:.0f} MB), relevant-token share "
            f"{self.relevant_token_share:.3f}"
            if self.windows
            else ""
        )
        low = f" ({self.low_overlap_groups} low-overlap)" if self.low_overlap_groups is not None else ""
        return (
            f"{name}: {self.records} records in {self.groups} groups{low} ({self.positives} positive, "
            f"{self.negatives} negative){windows}, duplicates removed {self.duplicates_removed}, dropped: {dropped}"
        )


def read_records(
    files: list[str],
    max_groups: int | None = None,
    dedup: bool = True,
    seed: int = 0,
    low_overlap_share: float | None = None,
    mix: dict[str, float] | None = None,
) -> tuple[list[dict], DataReport]:
    """Validated labeled records of ``files`` (whole groups subsampled to ``max_groups``; with
    ``low_overlap_share``, that share of the kept groups, or all there are, are questions whose
    answer sentences share at most one content word with the query:
    :func:`pruner_model.evaluation.shifts.low_overlap_groups`, the ``low_overlap`` slice's criterion).

    With ``mix`` (source -> weight), the ``max_groups`` groups are drawn from each source in
    proportion to its weight (sources without a weight are left out), the low-overlap share
    applying within each source."""
    report = DataReport(files=[str(f) for f in files])
    records = _read_files(files, dedup, report)
    if mix is not None:
        records = _only_mixed(records, mix, report)
    if max_groups is not None:
        keep, n_low = _draw_groups(records, max_groups, seed, low_overlap_share, mix)
        if low_overlap_share is not None:
            report.low_overlap_groups = n_low
        records = [r for r in records if group_of(r) in keep]
    report.records = len(records)
    report.positives = sum(1 for r in records if r["relevant_spans"])
    report.negatives = report.records - report.positives
    report.groups = len({group_of(r) for r in records})
    return records, report


def _read_files(files: list[str], dedup: bool, report: DataReport) -> list[dict]:
    """Every valid record of ``files`` (empty ones dropped, duplicates removed with ``dedup``),
    reduced to the fields training reads; counted in ``report``."""
    seen: set[str] = set()
    records: list[dict] = []
    for f in files:
        if not Path(f).is_file():
            raise RecordError(
                f"{f}: no such file (build it with 'pruner data qa', 'pruner data squad --file' or 'pruner annotate')"
            )
        for lineno, rec in enumerate(iter_jsonl(f), 1):
            report.records_read += 1
            validate_labeled(rec, f"{f}:{lineno}")
            if not rec["context"].strip():
                report.dropped["empty context"] = report.dropped.get("empty context", 0) + 1
                continue
            if not rec["query"].strip():
                report.dropped["empty query"] = report.dropped.get("empty query", 0) + 1
                continue
            if dedup:
                key = hashlib.sha1(f"{rec['query']}\x00{rec['context']}".encode()).hexdigest()
                if key in seen:
                    report.duplicates_removed += 1
                    continue
                seen.add(key)
            record = {k: rec[k] for k in ("id", "query", "context", "relevant_spans")}
            meta = rec.get("meta") or {}
            record["meta"] = {"group": group_of(rec), "source": source_of(rec)}
            # every annotator's answer: calibration.every_answer labels their sentences
            if meta.get("answers"):
                record["meta"]["answers"] = meta["answers"]
            for key in ("role", "passage_only"):  # the passage's part in its group; sentences unlabeled
                if key in meta:
                    record["meta"][key] = meta[key]
            records.append(record)
    return records


def _only_mixed(records: list[dict], mix: dict[str, float], report: DataReport) -> list[dict]:
    """The records of the sources ``mix`` weighs; a source it names that no record has is an error."""
    found = sorted({r["meta"]["source"] for r in records})
    missing = sorted(set(mix) - set(found))
    if missing:
        raise RecordError(
            f"data.mix names source {missing[0]!r}, which no record of {', '.join(report.files)} has "
            f"(sources there: {', '.join(found) or 'none'}): give its file in data.train, or leave it "
            "out of data.mix (or remove data.mix to train on every record)"
        )
    left_out = sum(r["meta"]["source"] not in mix for r in records)
    if left_out:
        report.dropped["source not in data.mix"] = left_out
    return [r for r in records if r["meta"]["source"] in mix]


def _draw_groups(records, max_groups: int, seed: int, low_overlap_share, mix) -> tuple[set, int]:
    """The ids of the ``max_groups`` groups drawn (from each source by its ``mix`` weight) and
    how many of them are low-overlap questions."""
    if mix is None:
        return _draw(records, max_groups, seed, low_overlap_share)
    total = sum(mix.values())
    by_source = records_by_source(records)
    keep, n_low = set(), 0
    for k, (src, weight) in enumerate(sorted(mix.items())):
        ids, low = _draw(
            by_source.get(src, []), round(max_groups * weight / total), seed + k, low_overlap_share
        )
        keep |= ids
        n_low += low
    return keep, n_low


def _draw(records: list[dict], n: int, seed: int, low_overlap_share: float | None) -> tuple[set, int]:
    """The ids of ``n`` seeded groups of ``records`` (``low_overlap_share`` of them low-overlap),
    and how many of them are low-overlap (0 without a share)."""
    gids = sorted({group_of(r) for r in records})
    random.Random(seed).shuffle(gids)
    if low_overlap_share is None:
        return set(gids[:n]), 0
    low = low_overlap_groups(records)
    low_ids = [g for g in gids if g in low]
    n_low = round(low_overlap_share * n)
    others = [g for g in gids if g not in low][: n - min(n_low, len(low_ids))]
    gids = low_ids[:n_low] + others + low_ids[n_low:]  # short of others: more low-overlap
    return set(gids[:n]), sum(g in low for g in gids[:n])


def augment_noise(records: list[dict], share: float, seed: int) -> list[dict]:
    """``share`` of the query groups rewritten as user-generated-looking text (whole groups, so a
    query reads the same in all its passages; :func:`pruner_model.evaluation.textnoise.noisy_record`)."""
    rng = random.Random(f"noise:{seed}")
    gids = sorted({group_of(r) for r in records})
    chosen = set(rng.sample(gids, round(share * len(gids))))
    return [
        noisy_record(r, random.Random(f"{seed}:{r['id']}")) if group_of(r) in chosen else r for r in records
    ]


# over 60 lines: one datasets.map over the records with its batch function, kept beside the features it declares
def tokenize_records(
    records: list[dict],
    tokenizer,
    max_length: int,
    stride: int,
    max_query_length: int,
    report: DataReport | None = None,
    batch_size: int = 256,
    teacher: np.ndarray | None = None,
):
    """A ``datasets.Dataset`` of windows: model inputs, ``labels``, ``relevance``, ``record``,
    ``group`` (index of the record's query group) and ``sentence_ids`` (the sentence each token
    falls in, -1 off the context: the units inference scores, for the sentence ranking loss); with
    ``teacher`` (one score per record), a ``teacher`` column: each window its record's score."""
    from datasets import Dataset, Features, Sequence, Value

    gids: dict[str, int] = {}
    for r in records:
        gids.setdefault(group_of(r), len(gids))
    ds = Dataset.from_list(
        [
            {"query": r["query"], "context": r["context"], "relevant_spans": r["relevant_spans"]}
            | {"record": i, "group": gids[group_of(r)]}
            | {"passage_only": bool((r.get("meta") or {}).get("passage_only"))}
            | ({} if teacher is None else {"teacher": float(teacher[i])})
            for i, r in enumerate(records)
        ]
    )

    def encode(batch):
        w = encode_pairs(tokenizer, batch["query"], batch["context"], max_length, stride, max_query_length)
        out = {k: v for k, v in w.features.items()}
        labels = [span_labels(off, batch["relevant_spans"][p]) for off, p in zip(w.offsets, w.pair_index)]
        only = [bool(batch["passage_only"][p]) for p in w.pair_index]
        # a relevant passage whose sentences carry no labels (free-form answers): it trains the
        # relevance head; the token head and sentence ranking see no label in it
        out["relevance"] = [1.0 if o else float((lab == 1).any()) for lab, o in zip(labels, only)]
        out["labels"] = [
            np.full_like(lab, IGNORE_INDEX).tolist() if o else lab.tolist() for lab, o in zip(labels, only)
        ]
        out["record"] = [batch["record"][p] for p in w.pair_index]
        out["group"] = [batch["group"][p] for p in w.pair_index]
        if "teacher" in batch:
            out["teacher"] = [batch["teacher"][p] for p in w.pair_index]
        bounds = [unit_bounds(segment(context)) for context in batch["context"]]
        out["sentence_ids"] = [  # -1 in passage-only rows: their sentences are no one's negatives
            (np.full(len(off), -1) if o else token_to_sentence(off[:, 0], *bounds[p])).tolist()
            for off, p, o in zip(w.offsets, w.pair_index, only)
        ]
        return out

    # narrow integer columns: Arrow infers int64 from Python ints, 4-8x what these values need,
    # and the tokenized set stays in memory for the whole run
    probe = encode(ds[:1])
    narrow = {"input_ids": "int32", "labels": "int8", "sentence_ids": "int32"}
    features = Features(
        {
            k: Sequence(Value(narrow.get(k, "int8"))) if isinstance(v[0], list) else Value(_scalar(k))
            for k, v in probe.items()
        }
    )
    ds = ds.map(
        encode,
        batched=True,
        batch_size=batch_size,
        remove_columns=ds.column_names,
        features=features,
        desc="tokenizing",
        load_from_cache_file=False,
    )
    if report is not None:
        report.windows = len(ds)
        report.memory_mb = ds.data.nbytes / 2**20
        pos = tot = 0
        for batch in ds.data.column("labels").chunks:  # Arrow buffers, no Python lists
            a = batch.flatten().to_numpy()
            pos += int((a == 1).sum())
            tot += int((a != IGNORE_INDEX).sum())
        report.relevant_token_share = pos / tot if tot else 0.0
    return ds


def _scalar(name: str) -> str:
    return "float32" if name in ("relevance", "teacher") else "int64"
