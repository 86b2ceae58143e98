"""Where bf16 is native and int8 has VNNI, which of the two a no-flag checkpoint load runs.

On such a CPU (an AVX-512 BF16 EPYC, a Cooper Lake Xeon) int8 dot products do twice the work of
bf16's per instruction, but whether a checkpoint's int8 graph outruns its torch bf16 depends on
the graph: the shipped model's all-int8 graph ran 2.1-2.3x torch fp32 end to end on 2 AVX-512
BF16 EPYC cores against bf16's 1.5-1.6x, while a graph whose feed-forward projections stay fp32
(the multilingual recipe's) ran slower than bf16 there. So the first no-flag load that finds the
int8 export times both on one fixed 5-window batch, alternating, best of a few rounds (about a
second), and records the result in the export (``speed.json``, with the CPU class it was measured
on); later loads read it, and a record from another CPU class is measured again.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from pruner_model.core.records import error_line, write_json

logger = logging.getLogger(__name__)
SPEED_FILE = "speed.json"
WINDOWS, TOKENS, ROUNDS = 5, 160, 3  # one 5-passage query of 160-token windows


def int8_outruns_bf16(path: Path, cache: Path) -> bool:
    """Whether the validated int8 graph in the export ``cache`` of the checkpoint ``path`` scores
    faster than the checkpoint in torch bf16 on this CPU: read from ``cache/speed.json`` when it
    was measured on this CPU class, else measured now and recorded. False (bf16) when it cannot be
    measured, with one line saying why."""
    from pruner_model.core.precision import cpu_class

    record, klass = cache / SPEED_FILE, cpu_class()
    try:
        saved = json.loads(record.read_text(encoding="utf-8"))
        if saved.get("cpu_class") == klass:
            return float(saved["int8_ms"]) < float(saved["bf16_ms"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    try:
        int8_ms, bf16_ms = time_int8_and_bf16(path, cache)
    except Exception as exc:  # noqa: BLE001 - any failure of the probe leaves the bf16 default
        logger.warning(f"could not time {path}'s int8 graph against bf16 ({error_line(exc)}): it runs bf16")
        return False
    faster = int8_ms < bf16_ms
    try:
        write_json(record, {"cpu_class": klass, "int8_ms": int8_ms, "bf16_ms": bf16_ms})
    except OSError as exc:
        logger.debug("speed record not written (%s): the next load measures again", error_line(exc))
    logger.warning(
        f"on this {klass} CPU the int8 graph of {path} scores a 5-passage query in {int8_ms:.0f} ms, "
        f"torch bf16 in {bf16_ms:.0f} ms: no-flag loads run {'int8' if faster else 'bf16'} "
        f"(recorded in {record})"
    )
    return faster


def time_int8_and_bf16(path: Path, cache: Path) -> tuple[float, float]:
    """Milliseconds for one fixed batch of ``WINDOWS`` windows of ``TOKENS`` tokens through the int8
    graph of ``cache`` and through the checkpoint ``path`` in torch bf16: the two alternate, best
    of ``ROUNDS`` each after a warm-up call, each at its default thread count."""
    from pruner_model.inference.backends import TorchBackend
    from pruner_model.inference.onnx_backend import OnnxBackend
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    text = " ".join(
        f"Sentence {i} of a passage says where the tower stands and when it was built." for i in range(40)
    )
    enc = tokenizer(
        ["Where is the tower?"] * WINDOWS,
        [text] * WINDOWS,
        truncation="only_second",
        max_length=TOKENS,
        padding="max_length",
        return_tensors="np",
    )
    batch = {name: enc[name] for name in tokenizer.model_input_names if name in enc}
    backends = (
        OnnxBackend.from_pretrained(cache, device="cpu", quantized=True),
        TorchBackend.from_pretrained(path, device="cpu", dtype="bf16"),
    )
    best = [float("inf"), float("inf")]
    for backend in backends:
        backend(batch)  # warm-up: first-call allocations and kernel choices
    for _ in range(ROUNDS):
        for i, backend in enumerate(backends):
            start = time.perf_counter()
            backend(batch)
            best[i] = min(best[i], (time.perf_counter() - start) * 1000)
    return best[0], best[1]
