"""Reading and writing the project's JSONL records with clear errors and atomic writes."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


class RecordError(ValueError):
    """A data file that cannot be read as the expected records; the message is one line."""


def read_text(path: str | Path) -> str:
    """The UTF-8 text of ``path``, or a one-line :class:`RecordError`."""
    path = Path(path)
    if not path.is_file():
        raise RecordError(f"{path}: no such file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"{path}: not UTF-8 (byte {exc.start}: {exc.reason})") from None


def iter_jsonl(path: str | Path, skip_errors: bool = False) -> Iterator[dict]:
    """Yield the JSON objects of a JSONL file; a malformed line raises (or is skipped)."""
    path = Path(path)
    if not path.is_file():
        raise RecordError(f"{path}: no such file")
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                if skip_errors:
                    continue
                raise RecordError(f"{path}:{lineno}: not UTF-8") from None
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                if skip_errors:
                    continue
                raise RecordError(f"{path}:{lineno}: malformed JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                if skip_errors:
                    continue
                raise RecordError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield obj


def read_jsonl(path: str | Path, skip_errors: bool = False) -> list[dict]:
    return list(iter_jsonl(path, skip_errors=skip_errors))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | Path):
    """A temporary path beside ``path``, for writers that take a file name: renamed into place
    only on success, removed on failure (nothing half-written is left behind)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; the result gets a plain file's mode
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@contextmanager
def atomic_open(path: str | Path, mode: str = "w"):
    """Write to a temporary file beside ``path`` and rename it into place only on success."""
    with atomic_path(path) as tmp, open(tmp, mode, encoding=None if "b" in mode else "utf-8") as fh:
        yield fh


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    """Atomically write ``records`` as JSONL; returns the count."""
    n = 0
    with atomic_open(path) as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n


def write_json(path: str | Path, obj) -> None:
    with atomic_open(path) as fh:
        json.dump(obj, fh, indent=2, ensure_ascii=False)
        fh.write("\n")


def validate_labeled(rec: dict, where: str = "") -> dict:
    """Check one labeled record (docs/api.md, records) and return it; raises a one-line RecordError."""
    prefix = f"{where}: " if where else ""
    for key in ("id", "query", "context"):
        if not isinstance(rec.get(key), str):
            raise RecordError(f"{prefix}record lacks a string {key!r}")
    spans = rec.get("relevant_spans")
    if not isinstance(spans, list):
        raise RecordError(f"{prefix}record {rec['id']!r} lacks a 'relevant_spans' list")
    n = len(rec["context"])
    for sp in spans:
        if (
            not isinstance(sp, list | tuple)
            or len(sp) != 2
            or not all(isinstance(x, int) for x in sp)
            or not 0 <= sp[0] < sp[1] <= n
        ):
            raise RecordError(f"{prefix}record {rec['id']!r} has a bad span {sp!r} (context length {n})")
    return rec


def repair_jsonl(path: str | Path) -> int:
    """Cut a half-written last line (no trailing newline) off an append-only JSONL file, so a run
    that crashed mid-write can resume appending. Returns the number of bytes removed."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return 0
    with open(path, "rb+") as fh:
        data = fh.read()
        if data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        fh.truncate(keep)
        return len(data) - keep


def parse_shard(text: str | None) -> tuple[int, int]:
    """``"K/N"`` (0 <= K < N) as ``(K, N)``; None is the whole file ``(0, 1)``."""
    if text is None:
        return 0, 1
    k, sep, n = text.partition("/")
    if not sep or not k.isdigit() or not n.isdigit() or not 0 <= int(k) < int(n):
        raise ValueError(f"--shard must be K/N with 0 <= K < N, got {text!r}")
    return int(k), int(n)


def shard_of(group_id: str, shards: int) -> int:
    """Stable shard of an id: the same on every machine and Python run (no ``hash()`` salt)."""
    return int.from_bytes(hashlib.sha1(group_id.encode("utf-8")).digest()[:8], "big") % shards
