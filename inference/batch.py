"""Batch pruning of a JSONL file of raw groups ``{"id", "query", "passages"}``: one output line per
group (``{"id", ...PruneResult.to_dict()}``), appended and flushed as it goes, resumable, and
shardable by a stable hash of the ids so N machines split one file without talking."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from pruner_model.records import RecordError, iter_jsonl, repair_jsonl, shard_of


@dataclass
class BatchStats:
    done: int = 0
    skipped: int = 0  # already in the output
    other_shards: int = 0
    seconds: float = 0.0


def _done_ids(output: Path) -> set[str]:
    repair_jsonl(output)
    if not output.is_file():
        return set()
    return {str(r["id"]) for r in iter_jsonl(output, skip_errors=True) if "id" in r}


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

    Groups already in the output are skipped (a half-written last line is cut off first), so a
    re-run resumes; the outputs of the N shards together hold each group exactly once.

    Raises:
        RecordError: a malformed input line (named by file and line).
    """
    input_path, output_path = Path(input_path), Path(output_path)
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    k, n = shard
    done = _done_ids(output_path)
    stats = BatchStats()
    output_path.parent.mkdir(parents=True, exist_ok=True)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc=f"pruning shard {k}/{n}" if n > 1 else "pruning", unit="query")
    t0 = time.perf_counter()
    pending: list[tuple[str, str, list]] = []

    def flush(out) -> None:
        results = pruner.prune_batch([(q, ps) for _, q, ps in pending], params)
        out.write(
            "".join(
                json.dumps({"id": gid, **r.to_dict()}, ensure_ascii=False) + "\n"
                for (gid, _, _), r in zip(pending, results)
            )
        )
        out.flush()
        stats.done += len(pending)
        if bar is not None:
            bar.update(len(pending))
        pending.clear()

    try:
        with open(output_path, "a", encoding="utf-8") as out:
            for lineno, g in enumerate(iter_jsonl(input_path), 1):
                if (
                    "id" not in g
                    or not isinstance(g.get("query"), str)
                    or not isinstance(g.get("passages"), list)
                ):
                    raise RecordError(f"{input_path}:{lineno}: expected {{id, query, passages}}")
                gid = str(g["id"])
                if n > 1 and shard_of(gid, n) != k:
                    stats.other_shards += 1
                    continue
                if gid in done:
                    stats.skipped += 1
                    continue
                done.add(gid)  # an id repeated in the input is pruned once
                pending.append((gid, g["query"], g["passages"]))
                if len(pending) >= batch_size:
                    flush(out)
            if pending:
                flush(out)
    finally:
        if bar is not None:
            bar.close()
    stats.seconds = time.perf_counter() - t0
    return stats
