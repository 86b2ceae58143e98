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


# the language of a record's ``source`` where it is not English (the public QA sets of
# annotation/public_qa.py, by the names `pruner data qa` writes; any other source is taken as English)
SOURCE_LANGUAGE = {
    **{f"xquad_{c}": c for c in ("ar", "de", "el", "es", "hi", "ro", "ru", "th", "tr", "vi", "zh")},
    **{f"tydiqa_{c}": c for c in ("ar", "bn", "fi", "id", "ko", "ru", "sw", "te")},
    "cmrc2018": "zh",
    "drcd": "zh",
    "arcd": "ar",
    "korquad": "ko",
    "persianqa": "fa",
}
LANGUAGE_NAME = {  # every code above, for what a model card says it was trained on
    "ar": "Arabic", "bn": "Bengali", "de": "German", "el": "Greek", "en": "English",
    "es": "Spanish", "fa": "Persian", "fi": "Finnish", "hi": "Hindi", "id": "Indonesian",
    "ko": "Korean", "ro": "Romanian", "ru": "Russian", "sw": "Swahili", "te": "Telugu",
    "th": "Thai", "tr": "Turkish", "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip


def default_cache_dir() -> Path:
    """Where downloads and caches live: ``$PRUNER_CACHE``, else ``~/.cache/pruner``."""
    return Path(os.environ.get("PRUNER_CACHE", Path.home() / ".cache" / "pruner"))


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


def current_umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def error_line(exc: BaseException) -> str:
    """An exception as the one line a user is shown: its first line, or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextmanager
def atomic_path(path: str | Path):
    """A temporary path beside ``path``, for writers that take a file name: renamed into place
    only on success, removed on failure (nothing half-written is left behind)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600; the result gets a plain file's mode
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
        try:
            rec[key].encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (\ud800) that JSON let through
            raise RecordError(
                f"{prefix}record's {key!r} is not valid Unicode text (a lone surrogate)"
            ) from None
    if rec.get("meta") is not None and not isinstance(rec["meta"], dict):
        raise RecordError(f"{prefix}record {rec['id']!r} has a 'meta' that is not an object")
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


def writing_marker(path: str | Path) -> Path:
    """The file that says a run of ours is appending to ``path`` (left behind by a crash)."""
    path = Path(path)
    return path.with_name(path.name + ".writing")


def _writer_alive(marker: Path) -> int | None:
    """The pid in ``marker`` when that process is running (not this one), else None."""
    try:
        pid = int(json.loads(marker.read_text(encoding="utf-8"))["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if pid == os.getpid() or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # running, as another user
        return pid
    return pid


def _claim(marker: Path, path: Path) -> bool:
    """Create ``marker`` with this pid, exclusively: a marker of a run that is still going refuses
    the output; one left by a run that stopped is taken over. Returns whether there was one (a
    run of ours stopped while writing ``path``)."""
    marker.parent.mkdir(parents=True, exist_ok=True)
    stale = False
    for _ in range(3):
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            pid = _writer_alive(marker)
            if pid is not None:
                raise RecordError(
                    f"{path} is being written by another run (pid {pid}): wait for it, or choose another "
                    f"--output (if no such run is going, remove {marker})"
                ) from None
            marker.unlink(missing_ok=True)  # left by a run that stopped: ours now
            stale = True
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"pid": os.getpid()}) + "\n")
        return stale
    raise RecordError(f"{path}: could not claim {marker} (another run starting at the same time?)")


@contextmanager
def resumable_output(path: str | Path, inputs: Iterable[str | Path] = (), what: str = "this command"):
    """Open an append-only JSONL output of a resumable run, touching only what we wrote.

    Refuses an output that is one of ``inputs``, or that holds a line that is not a JSON object
    (not an output of ``what``). A half-written last line is cut off only when the marker
    (:func:`writing_marker`) shows that a run of ours was writing the file when it stopped; a
    file of someone else's that lacks a final newline is refused, never cut. The marker lives
    while the run writes and is removed once the file ends on a whole line.

    Raises:
        RecordError: the output cannot be used; nothing was changed.
    """
    path = Path(path)
    for other in inputs:
        other = Path(other)
        same = other.resolve() == path.resolve()
        if not same and other.exists() and path.exists():
            same = os.path.samefile(other, path)  # a hard link or another spelling of the path
        if same:
            raise RecordError(f"the output {path} is the input file: choose another --output")
    marker = writing_marker(path)
    stale = _claim(marker, path)  # before anything is read or cut: another live run's file is not ours
    try:
        _check_output(path, stale, what)
    except RecordError:
        if not stale:  # refused: leave no marker of ours behind
            marker.unlink(missing_ok=True)
        raise
    try:
        yield path
    finally:
        if not path.is_file() or path.stat().st_size == 0 or _ends_with_newline(path):
            marker.unlink(missing_ok=True)


def _check_output(path: Path, stale: bool, what: str) -> None:
    """An existing output must be JSON records of ours; a half-written last line is cut only when
    a run of ours (``stale``: its marker was there) stopped while writing it."""
    if path.is_file() and path.stat().st_size:
        with open(path, "rb") as fh:
            data = fh.read()
        partial = not data.endswith(b"\n")
        if partial and not stale:
            raise RecordError(
                f"{path} does not end with a newline and no run of {what} was writing it: not "
                "touched (choose another --output)"
            )
        lines = data.split(b"\n")[:-1]  # whole lines; a partial last one is ours to cut
        for lineno, raw in enumerate(lines, 1):
            try:
                ok = not raw.strip() or isinstance(json.loads(raw), dict)
            except (json.JSONDecodeError, UnicodeDecodeError):
                ok = False
            if not ok:
                raise RecordError(
                    f"{path}:{lineno} is not a JSON record: not an output of {what}, not touched "
                    "(choose another --output)"
                )
        if partial:  # a crash of ours mid-line (rare): cut it
            repair_jsonl(path)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def canonical_id(value, where: str) -> str:
    """A record's id as the string every resume keys it by: strings and integers only, so that
    ``7`` and ``"7"`` are the same id (and a duplicate when both appear)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RecordError(f"{where}: id must be a string or an integer, got {type(value).__name__}")
    text = str(value)
    if not text.strip():
        raise RecordError(f"{where}: id is empty")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError(f"{where}: id is not valid Unicode (a lone surrogate)") from None
    return text


def check_unique_ids(ids: Iterable[tuple[str, str]]) -> None:
    """``(canonical id, where)`` pairs: raises naming both places of the first repeated id."""
    seen: dict[str, str] = {}
    for gid, where in ids:
        if gid in seen:
            raise RecordError(
                f"id {gid!r} appears twice ({seen[gid]} and {where}): ids must be unique, and 7 and "
                '"7" are the same id'
            )
        seen[gid] = where


def usage_count(value) -> int:
    """A token count reported by an endpoint: a non-negative integer, anything else (negative,
    NaN, a string, a bool) counts 0, so a misbehaving endpoint cannot lower the accounting."""
    if isinstance(value, bool):
        return 0
    try:
        n = int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0
    return n if n >= 0 else 0


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
