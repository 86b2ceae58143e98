"""The summarizer's cache: summaries on disk in one SQLite file, keyed by the hash of (model,
prompt version, text), shared safely by threads and processes."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from pathlib import Path

from pruner_model.core.records import default_cache_dir

PROMPT_VERSION = "summarize-v1"  # a new prompt wording: new keys, old summaries unused


# ---------------------------------------------------------------------------- the cache
class SummaryCache:
    """Summaries on disk, keyed by ``sha256(model, prompt version, text)``.

    One SQLite file in WAL mode: concurrent threads and processes read and write it safely
    (a writer waits up to ``timeout`` seconds for another's lock). At most ``max_entries`` rows;
    above that the least recently used are deleted."""

    def __init__(self, path: str | Path, max_entries: int = 100_000, timeout: float = 10.0):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_entries = max_entries
        self._timeout = timeout
        self._local = threading.local()
        try:
            with self._db() as db:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS summaries (key TEXT PRIMARY KEY, summary TEXT, used REAL)"
                )
                db.execute("CREATE INDEX IF NOT EXISTS by_use ON summaries (used)")
        except sqlite3.DatabaseError as exc:  # a damaged or foreign file: name it, say what to do
            raise ValueError(
                f"{self.path}: not a usable summary cache ({exc}); delete it, or give the summarizer "
                "another cache path"
            ) from None

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
            self._local.db = db
        return db

    @staticmethod
    def key(model: str, text: str) -> str:
        return hashlib.sha256(f"{model}\0{PROMPT_VERSION}\0{text}".encode()).hexdigest()

    def get(self, key: str) -> str | None:
        db = self._db()
        row = db.execute("SELECT summary FROM summaries WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        db.execute("UPDATE summaries SET used = ? WHERE key = ?", (time.time(), key))
        return row[0]

    def put(self, key: str, summary: str) -> None:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")  # one writer at a time: the count and the eviction agree
        try:
            db.execute("INSERT OR REPLACE INTO summaries VALUES (?, ?, ?)", (key, summary, time.time()))
            (n,) = db.execute("SELECT COUNT(*) FROM summaries").fetchone()
            if n > self.max_entries:
                db.execute(
                    "DELETE FROM summaries WHERE key IN (SELECT key FROM summaries ORDER BY used LIMIT ?)",
                    (n - self.max_entries,),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def __len__(self) -> int:
        return self._db().execute("SELECT COUNT(*) FROM summaries").fetchone()[0]


def default_cache_path() -> Path:
    return default_cache_dir().expanduser() / "summaries.sqlite"
