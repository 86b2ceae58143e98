"""The first no-flag load of a checkpoint on a CPU that prefers int8 builds its int8 graph.

Where bf16 is not native (an AVX2-only CPU), and where int8 dot products (VNNI) outrun bf16's (an
AVX-512 BF16 CPU without AMX: :func:`pruner_model.core.precision.cpu_prefers_int8`), the fast way
to run a checkpoint is its validated int8 ONNX graph (:func:`pruner_model.inference.loading.cached_int8`). When no export of the checkpoint
is cached yet, the load runs ``pruner export --model PATH --cache --quantize int8`` once, in a
child process (the trace, fusions, quantization and validation against torch hold about 1.4 GB
for the shipped model, given back when the child exits), and runs the graph it wrote: about 20 s
for the shipped model on a 2-core AVX2 EPYC, once per checkpoint and machine. Every later load
finds the export by the checkpoint's digest.

Processes that load the same checkpoint at once (a server's workers) build it once: the others
wait on a lock file beside it. A build that fails or runs past ``TIMEOUT_S`` leaves a
``<digest>.failed`` file with its reason and the checkpoint runs torch; loads do not try again
until that file is removed or ``pruner export --cache`` succeeds. ``PRUNER_AUTO_INT8=0`` turns the
build off (a precision asked for, ``dtype="fp32"`` or ``quantized=False``, never builds either).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from pruner_model.core.precision import int8_reason
from pruner_model.core.records import error_line

logger = logging.getLogger(__name__)
AUTO_ENV = "PRUNER_AUTO_INT8"  # "0" (or off/false/no): no-flag loads never build an int8 export
TIMEOUT_S = 900  # a build that takes longer is stopped; the checkpoint runs torch
EXPORT_COMMAND = [sys.executable, "-m", "pruner_model.cli", "export", "--cache", "--quantize", "int8"]


def auto_build_enabled() -> bool:
    """Whether a no-flag load may build a checkpoint's int8 export (``PRUNER_AUTO_INT8``)."""
    return os.environ.get(AUTO_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def failure_file(cache: Path) -> Path:
    """Where a failed build of the export ``cache`` leaves its reason (beside it)."""
    return cache.with_name(cache.name + ".failed")


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on the file ``path`` for the block (waits for another holder)."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): concurrent builds replace each other whole
        yield
        return
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_int8_export(path: Path, cache: Path) -> bool:
    """Build the int8 export of the checkpoint folder ``path`` into ``cache`` (its
    :func:`~pruner_model.inference.loading.export_cache_dir`) unless it is there; True when an
    export is there afterwards (whether its int8 graph was kept is the export's own verdict)."""
    import importlib.util

    if importlib.util.find_spec("onnx") is None:  # the export's own dependency (pruner-model[onnx])
        logger.debug("no int8 build: the onnx package is not installed (pip install 'pruner-model[onnx]')")
        return False
    failed = failure_file(cache)
    if failed.is_file():
        logger.debug("no int8 build: %s holds why the last one failed", failed)
        return False
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with _locked(cache.with_name(cache.name + ".lock")):
            if (cache / "export_report.json").is_file():
                return True  # another process built it while this one waited
            if failed.is_file():
                return False
            return _run_build(path, cache, failed)
    except OSError as exc:
        logger.warning(f"no int8 build for {path} ({error_line(exc)}): it runs torch")
        return False


def _run_build(path: Path, cache: Path, failed: Path) -> bool:
    """Run the export in a child process; on failure, write ``failed`` and say why in one line."""
    logger.warning(
        f"{int8_reason()}: building the int8 graph of {path} once (about 20 s for the "
        f"shipped model on 2 AVX2 EPYC cores) into {cache}; {AUTO_ENV}=0 to skip"
    )
    start = time.monotonic()
    command = [*EXPORT_COMMAND, "--model", str(path)]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT_S, env={**os.environ, AUTO_ENV: "0"}
        )
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        reason = None if proc.returncode == 0 else (lines[-1] if lines else f"exit status {proc.returncode}")
    except subprocess.TimeoutExpired:
        reason = f"stopped after {TIMEOUT_S} s"
    except OSError as exc:
        reason = error_line(exc)
    if reason is None and (cache / "export_report.json").is_file():
        logger.warning(f"int8 graph built in {time.monotonic() - start:.0f} s")
        return True
    reason = reason or "the export wrote no report"
    failed.write_text(reason + "\n", encoding="utf-8")
    logger.warning(
        f"int8 build failed ({reason}): {path} runs torch; to try again remove {failed} "
        f"or run: pruner export --model {path} --cache --quantize int8"
    )
    return False
