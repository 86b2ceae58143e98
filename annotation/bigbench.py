"""The ``bigbench==1.0.0`` sdist that the embedded QA corpus is read from: where it comes from
(a copy the user names, the cache, or pip), the check that it is one, and extraction of the
task files that may be read.

The sdist is found, in order: ``sdist=`` (``pruner data squad|mix --sdist PATH``), then
``$PRUNER_BIGBENCH_SDIST`` (either may also name a checkout of the BIG-bench repository, or an
unpacked sdist: its ``bigbench/benchmark_tasks/`` files are read as they are), then
``<cache>/downloads/bigbench-1.0.0.tar.gz``; only when none is there is it downloaded with ``pip
download`` (which follows pip's own index settings, so a mirror named by ``PIP_INDEX_URL`` serves
it too). A download goes to a temporary folder and is moved into the cache whole, so an
interrupted one leaves nothing behind.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

from pruner_model.core.records import atomic_open, default_cache_dir

logger = logging.getLogger(__name__)

VERSION = "1.0.0"
FILE = f"bigbench-{VERSION}.tar.gz"
ENV = "PRUNER_BIGBENCH_SDIST"
TASKS = f"bigbench-{VERSION}/bigbench/benchmark_tasks/"  # the task files' folder in the sdist
REMEDY = (
    f"give a copy of {FILE} (358 MB), or a checkout of the BIG-bench repository, with --sdist PATH or "
    f"${ENV}, put the sdist at {{cached}}, or point pip at an index that serves it (PIP_INDEX_URL)"
)

WITHOUT = (  # what a user can do with no copy at all
    "; without the corpus, `pruner adapt --labeled FILE --output DIR` trains a pruner on labeled records "
    "of your own text"
)


class SdistError(RuntimeError):
    """The sdist cannot be had or is not a readable ``bigbench`` 1.0.0 sdist (one line)."""


def cached_sdist(cache_dir: Path | None = None) -> Path:
    return Path(cache_dir or default_cache_dir()) / "downloads" / FILE


def locate_sdist(cache_dir: Path | None = None, sdist: str | Path | None = None) -> Path:
    """The sdist to read: the one named (``sdist``, else ``$PRUNER_BIGBENCH_SDIST``), else the
    cached one, else a fresh download into the cache."""
    named = sdist or os.environ.get(ENV)
    if named:
        path = Path(named).expanduser()
        if not path.exists():
            source = "--sdist" if sdist else f"${ENV}"
            raise SdistError(
                f"{source} {path}: no such file or folder (a copy of {FILE}, or a checkout of the "
                "BIG-bench repository)"
            )
        return path
    cached = cached_sdist(cache_dir)
    return cached if cached.is_file() else download_sdist(cached)


def download_sdist(target: Path) -> Path:
    """``pip download bigbench==1.0.0`` (the sdist, no dependencies) into a temporary folder beside
    ``target``, then moved to ``target``; a one-line :class:`SdistError` saying what to do instead
    when pip cannot get it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    logger.info(f"downloading bigbench=={VERSION} sdist (358 MB, once) into {target.parent}")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
            f"bigbench=={VERSION}", "-d", tmp, "--quiet",
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / FILE
        if proc.returncode != 0 or not got.is_file():
            last = (proc.stderr.strip().splitlines() or ["pip wrote no file"])[-1].removeprefix("ERROR: ")
            raise SdistError(
                f"could not download bigbench=={VERSION} ({last}): " + REMEDY.format(cached=target) + WITHOUT
            )
        os.replace(got, target)
    return target


def extract(members: dict[str, Path], cache_dir: Path | None = None, sdist: str | Path | None = None) -> None:
    """Copy ``members`` (path under ``bigbench/benchmark_tasks/`` -> target file) out of the sdist,
    each written whole or not at all. Every member is looked up before any is written: a file that
    is not the 1.0.0 sdist, or a damaged one, is a one-line :class:`SdistError` and writes nothing."""
    path = locate_sdist(cache_dir, sdist)
    if path.is_dir():
        data = {name: _read_from_checkout(path, name) for name in members}
        _write_whole(members, data)
        return
    fix = (
        " (delete it and run again, or give a copy with --sdist PATH)"
        if path == cached_sdist(cache_dir)
        else ""
    )
    try:
        with tarfile.open(path) as tar:
            found = {}
            for name in members:
                try:
                    found[name] = tar.getmember(TASKS + name)
                except KeyError:
                    raise SdistError(
                        f"{path} is not the bigbench {VERSION} sdist: it has no {TASKS + name}{fix}"
                    ) from None
                if not found[name].isfile():
                    raise SdistError(f"{path}: {TASKS + name} is not a file{fix}")
            data = {name: tar.extractfile(m).read() for name, m in found.items()}
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        reason = str(exc).strip().splitlines()[0].rstrip(":") if str(exc).strip() else type(exc).__name__
        if reason.startswith("file could not be opened"):  # tarfile's multi-line "tried each method"
            reason = "not a tar archive"
        raise SdistError(f"{path} is not a readable bigbench {VERSION} sdist ({reason}){fix}") from None
    _write_whole(members, data)


def _write_whole(members: dict[str, Path], data: dict[str, bytes]) -> None:
    """Every member read before any is written: a damaged source writes nothing."""
    for name, target in members.items():
        with atomic_open(target, "wb") as fh:
            fh.write(data[name])


def _read_from_checkout(folder: Path, name: str) -> bytes:
    """``bigbench/benchmark_tasks/<name>`` of a checkout of the BIG-bench repository (or of an
    unpacked sdist: ``bigbench-1.0.0/`` inside ``folder``)."""
    tasks = TASKS.split("/", 1)[1]  # bigbench/benchmark_tasks/
    for root in (folder, folder / f"bigbench-{VERSION}"):
        if (root / tasks).is_dir():
            path = root / tasks / name
            if not path.is_file():
                raise SdistError(f"{folder} is a BIG-bench checkout without {tasks}{name}")
            return path.read_bytes()
    raise SdistError(f"{folder} is not a BIG-bench checkout or unpacked sdist: it has no {tasks}")
