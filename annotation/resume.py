"""Exact resume of an annotation run: which groups are done, and removing partly written ones."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pruner_model.core.records import iter_jsonl


def read_jsonl_lenient(path: Path) -> list[dict]:
    """The JSON objects of an append-only file, skipping undecodable lines ([] when absent)."""
    return list(iter_jsonl(path, skip_errors=True)) if path.is_file() else []


def drop_partial_groups(groups: list[dict], output: Path) -> list[dict]:
    """The groups still to label; lines of partly written groups are removed from ``output``.

    A record belongs to group ``g`` when its id is ``f"{g}/{passage id}"`` for one of the
    group's passages and its ``meta.group`` (written since records carry it) is ``g``."""

    def owner(r: dict) -> tuple[str | None, str]:
        meta = r.get("meta") if isinstance(r.get("meta"), dict) else {}
        group = meta.get("group")
        return (None if group is None else str(group)), str(r.get("id", ""))

    written = [owner(r) for r in read_jsonl_lenient(output)]
    by_id: dict[str, set[str | None]] = {}
    for group, rid in written:
        by_id.setdefault(rid, set()).add(group)
    todo, partial = [], set()
    for g in groups:
        gid = str(g["id"])
        want = [f"{gid}/{p.get('id', i)}" for i, p in enumerate(g["passages"])]
        have = [rid for rid in want if by_id.get(rid, set()) & {gid, None}]
        if len(have) == len(want):
            continue
        todo.append(g)
        partial.update((gid, rid) for rid in have)
    if partial:
        partial_ids = {rid for _, rid in partial}
        kept = []
        for line in output.read_text(encoding="utf-8").splitlines(keepends=True):
            try:
                group, rid = owner(json.loads(line))
            except (json.JSONDecodeError, AttributeError):
                group, rid = None, ""
            if not ((group, rid) in partial or (group is None and rid in partial_ids)):
                kept.append(line)
        tmp = output.with_name(output.name + ".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        os.replace(tmp, output)
    return todo
