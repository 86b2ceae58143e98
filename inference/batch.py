"""Batch pruning of a JSONL file of raw groups ``{"id", "query", "passages"}``: one output line per
group (``{"id", ...PruneResult.to_dict()}``), appended and flushed as it goes, resumable, and
shardable by a stable hash of the ids so N machines split one file without talking."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from pruner_model.core.records import (
    RecordError,
    canonical_id,
    check_unique_ids,
    iter_jsonl,
    resumable_output,
    shard_of,
)


@dataclass
class BatchStats:
    done: int = 0
    skipped: int = 0  # already in the output
    other_shards: int = 0
    seconds: float = 0.0


def _done_ids(output: Path) -> set[str]:
    if not output.is_file():
        return set()
    return {str(r["id"]) for r in iter_jsonl(output, skip_errors=True) if "id" in r}


def read_groups(input_path: Path) -> list[tuple[int, str, str, list]]:
    """``(line, id, query, passages)`` of every group, all checked before anything is pruned:
    a malformed group or a repeated id is named by its line, and nothing is written."""
    groups = []
    for lineno, g in enumerate(iter_jsonl(input_path), 1):
        where = f"{input_path}:{lineno}"
        if "id" not in g or not isinstance(g.get("query"), str) or not isinstance(g.get("passages"), list):
            raise RecordError(f"{where}: expected {{id, query, passages}}")
        gid = canonical_id(g["id"], where)
        for i, p in enumerate(g["passages"]):
            if not isinstance(p, str) and not (isinstance(p, dict) and isinstance(p.get("text"), str)):
                raise RecordError(f"{where}: passage {i} of group {gid!r} is neither a string nor {{text}}")
        groups.append((lineno, gid, g["query"], g["passages"]))
    check_unique_ids((gid, f"line {lineno}") for lineno, gid, _, _ in groups)
    return groups


# over 60 lines: the batch loop's writer, fallback and progress share the run's counters
def prune_file(
    pruner,
    input_path: str | Path,
    output_path: str | Path,
    params=None,
    shard: tuple[int, int] = (0, 1),
    batch_size: int = 16,
    progress: bool = True,
) -> BatchStats:
    """Prune every group of ``input_path`` in this shard into ``output_path``.

    Groups already in the output are skipped (a half-written last line that a crashed run of
    ours left is cut off first), so a re-run resumes; the outputs of the N shards together hold
    each group exactly once. Ids are unique strings or integers (``7`` and ``"7"`` are one id).

    Raises:
        RecordError: a malformed input line or a repeated id (named by file and line, checked
            before anything is written), a group whose text cannot be pruned (the groups before
            it are written), or an output that is the input or not one of ours.
    """
    input_path, output_path = Path(input_path), Path(output_path)
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    k, n = shard
    groups = read_groups(input_path)
    stats = BatchStats()
    bar = None
    t0 = time.perf_counter()
    pending: list[tuple[int, str, str, list]] = []

    def write(out, done: list, results: list) -> None:
        out.write(
            "".join(
                json.dumps({"id": gid, **r.to_dict()}, ensure_ascii=False) + "\n"
                for (_, gid, _, _), r in zip(done, results)
            )
        )
        out.flush()
        stats.done += len(done)
        if bar is not None:
            bar.update(len(done))

    def flush(out) -> None:
        try:
            write(out, pending, pruner.prune_batch([(q, ps) for _, _, q, ps in pending], params))
        except (ValueError, TypeError):
            # one group's input failed the batch: the others are written, the bad one is named
            for item in pending:
                lineno, gid, q, ps = item
                try:
                    result = pruner.prune_batch([(q, ps)], params)
                except (ValueError, TypeError) as exc:
                    raise RecordError(f"{input_path}:{lineno}: group {gid!r}: {exc}") from None
                write(out, [item], result)
        pending.clear()

    with resumable_output(output_path, [input_path], "pruner prune") as output_path:
        done = _done_ids(output_path)
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(desc=f"pruning shard {k}/{n}" if n > 1 else "pruning", unit="query")
        try:
            with open(output_path, "a", encoding="utf-8") as out:
                for item in groups:
                    gid = item[1]
                    if n > 1 and shard_of(gid, n) != k:
                        stats.other_shards += 1
                        continue
                    if gid in done:
                        stats.skipped += 1
                        continue
                    pending.append(item)
                    if len(pending) >= batch_size:
                        flush(out)
                if pending:
                    flush(out)
        finally:
            if bar is not None:
                bar.close()
    stats.seconds = time.perf_counter() - t0
    return stats
