"""Where bf16 is native and int8 has VNNI, which of the two a no-flag checkpoint load runs.

On such a CPU (an AVX-512 BF16 EPYC, a Cooper Lake Xeon) int8 dot products do twice the work of
bf16's per instruction, but whether a checkpoint's int8 graph outruns its torch bf16 depends on
the graph: the shipped model's all-int8 graph ran 2.1-2.3x torch fp32 end to end on 2 AVX-512
BF16 EPYC cores against bf16's 1.5-1.6x, while a graph whose feed-forward projections stay fp32
(the multilingual recipe's) ran slower than bf16 there. So the first no-flag load that finds the
int8 export loads the checkpoint in torch, lets it choose its precision as any no-flag load does
(bf16 where its keep/drop decisions agree with fp32's, else fp32:
:func:`~pruner_model.inference.agreement.choose_precision`), then times the int8 graph against
that torch backend on one fixed 5-window batch, alternating, best of a few rounds (about a
second), and keeps the faster; the result goes into the export (``speed.json``, with the CPU class
it was measured on and the torch precision it was measured against). Later loads read it and
load only the one that won; a record from another CPU class is measured again.
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


def recorded_verdict(cache: Path) -> bool | None:
    """Whether the int8 graph of the export ``cache`` outran its checkpoint's no-flag torch
    precision, as recorded on this CPU class; None when nothing usable is recorded (no record,
    another CPU class, or a record that does not name the torch precision it was timed against)."""
    from pruner_model.core.precision import cpu_class

    try:
        saved = json.loads((cache / SPEED_FILE).read_text(encoding="utf-8"))
        if saved.get("cpu_class") == cpu_class() and saved.get("torch_precision") in ("bf16", "fp32"):
            return float(saved["int8_ms"]) < float(saved["torch_ms"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def int8_outruns_torch(torch_backend, tokenizer, cache: Path):
    """The int8 graph of the export ``cache`` as an ONNX backend when it scores faster than
    ``torch_backend`` (in the precision it chose) on one fixed batch, else None; the timing is
    recorded in ``cache/speed.json`` and said in one line. None (torch) when the graph cannot be
    loaded or timed, with one line saying why."""
    from pruner_model.core.precision import cpu_class
    from pruner_model.inference.onnx_backend import OnnxBackend

    precision = torch_backend.precision
    try:
        int8 = OnnxBackend.from_pretrained(cache, device="cpu", quantized=True)
        int8_ms, torch_ms = time_backends(int8, torch_backend, tokenizer)
    except Exception as exc:  # noqa: BLE001 - any failure of the probe leaves the torch default
        logger.warning(
            f"could not time the int8 graph of {cache} against torch ({error_line(exc)}): it runs torch"
        )
        return None
    faster, klass = int8_ms < torch_ms, cpu_class()
    record = cache / SPEED_FILE
    try:
        write_json(
            record,
            {"cpu_class": klass, "int8_ms": int8_ms, "torch_ms": torch_ms, "torch_precision": precision},
        )
    except OSError as exc:
        logger.debug("speed record not written (%s): the next load measures again", error_line(exc))
    logger.warning(
        f"on this {klass} CPU the int8 graph scores a 5-passage query in {int8_ms:.0f} ms, torch "
        f"{precision} in {torch_ms:.0f} ms: no-flag loads run {'int8' if faster else precision} "
        f"(recorded in {record})"
    )
    return int8 if faster else None


def time_backends(first, second, tokenizer) -> tuple[float, float]:
    """Milliseconds for one fixed batch of ``WINDOWS`` windows of ``TOKENS`` tokens through two
    encoder backends: they alternate, best of ``ROUNDS`` each after a warm-up call."""
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
    backends = (first, second)
    best = [float("inf"), float("inf")]
    for backend in backends:
        backend(batch)  # warm-up: first-call allocations and kernel choices
    for _ in range(ROUNDS):
        for i, backend in enumerate(backends):
            start = time.perf_counter()
            backend(batch)
            best[i] = min(best[i], (time.perf_counter() - start) * 1000)
    return best[0], best[1]
