"""Which floating-point precision to run the encoder in, chosen from the machine.

bf16 autocast roughly doubles encoder throughput on GPUs that support it and on CPUs with native
bf16 matrix instructions (AVX-512 BF16 or AMX). On every other CPU (AVX2-only servers, most
laptops) torch emulates bf16 and a bf16 matmul runs tens of times slower than fp32 (measured on a
2-core AMD EPYC limited to AVX2: 1.3 against 25 GFLOP/s for a 256x384 by 384x1536 product).
So ``"auto"`` means bf16 where it is native and fp32 everywhere else, and one function,
:func:`resolve_precision`, makes that choice for training, calibration, evaluation and inference.

    >>> from pruner_model.core.precision import resolve_precision
    >>> resolve_precision("auto", "cpu") in ("bf16", "fp32")
    True
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

logger = logging.getLogger(__name__)

Precision = Literal["fp32", "bf16", "fp16"]
# what users may ask for; "no" is accelerate's spelling of fp32, None the library's
REQUESTS = ("auto", "fp32", "bf16", "fp16", "no")

# oneDNN runs torch's CPU matmuls; ONEDNN_MAX_CPU_ISA caps the instructions it may use. Caps below
# AVX512_CORE_BF16 leave bf16 emulated even on a CPU that has the instructions.
_ONEDNN_WITHOUT_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")
EMULATED_BF16_SLOWDOWN = "about 40x slower than fp32"  # see the module docstring


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux reports them (empty where /proc/cpuinfo is absent)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="ignore")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def _onednn_cap() -> str:
    """``ONEDNN_MAX_CPU_ISA`` (or its older name), upper case; "" when unset."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "")).strip().upper()


def cpu_has_bf16(flags: frozenset[str] | set[str] | None = None) -> bool:
    """Whether bf16 matmuls run natively on this CPU: AVX-512 BF16 or AMX, and not capped off by
    ``ONEDNN_MAX_CPU_ISA``."""
    flags = cpu_flags() if flags is None else flags
    return ("avx512_bf16" in flags or "amx_bf16" in flags) and _onednn_cap() not in _ONEDNN_WITHOUT_BF16


def cpu_prefers_int8(flags: frozenset[str] | set[str] | None = None) -> bool:
    """Whether a no-flag checkpoint load on this CPU looks for (and builds) its validated int8 ONNX
    graph rather than running torch: where bf16 is not native (int8 is the fast path), and where
    int8 dot products (VNNI: AVX-512 VNNI or AVX-VNNI) do twice the work of bf16's per instruction
    (on 2 AVX-512 BF16 EPYC cores onnxruntime's int8 GEMM ran 775-814 GOP/s against torch's bf16
    388-413 GFLOP/s, ``benchmarks/bench_inference.py``); there the graph must also measure faster
    than the checkpoint's bf16 (:mod:`pruner_model.inference.int8_speed`). Not on AMX, whose bf16
    tiles stay the default (int8 against them not measured)."""
    flags = cpu_flags() if flags is None else flags
    if not cpu_has_bf16(flags):
        return True
    return bool({"avx512_vnni", "avx_vnni"} & flags) and "amx_bf16" not in flags


def int8_reason(flags: frozenset[str] | set[str] | None = None) -> str:
    """Why a no-flag load runs int8 here, for the one line that says so."""
    flags = cpu_flags() if flags is None else flags
    if not cpu_has_bf16(flags):
        return "this CPU has no native bf16"
    return f"on this {cpu_class(flags)} CPU int8 (VNNI) outruns bf16"


def cpu_class(flags: frozenset[str] | set[str] | None = None) -> str:
    """The CPU's class for speed purposes: ``AMX``, ``AVX-512 BF16``, ``AVX-512``, ``AVX2``,
    ``ARM`` or ``other``. Timings in the docs name it."""
    flags = cpu_flags() if flags is None else flags
    cap = _onednn_cap()
    if cap in _ONEDNN_WITHOUT_BF16:  # what the kernels may use, not what the silicon has
        return "AVX-512" if cap.startswith("AVX512") else "AVX2" if cap.startswith("AVX2") else "other"
    if "amx_bf16" in flags:
        return "AMX"
    if "avx512_bf16" in flags:
        return "AVX-512 BF16"
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    if "asimd" in flags:
        return "ARM"
    return "other"


def _cuda_bf16() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def _device_type(device) -> str:
    if device is None or device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return getattr(device, "type", None) or str(device).split(":")[0]


_warned: set[tuple] = set()


def _warn_once(key: tuple, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)


def resolve_precision(
    requested: str | bool | None,
    device=None,
    *,
    purpose: Literal["training", "inference"] = "inference",
    flags: frozenset[str] | set[str] | None = None,
) -> Precision:
    """The precision to run in: ``"fp32"``, ``"bf16"`` or ``"fp16"``.

    Args:
        requested: ``"auto"`` (bf16 on a GPU that supports it or a CPU with native bf16, fp32
            otherwise), ``"bf16"``, ``"fp16"``, ``"fp32"``; ``"no"``, ``None`` and ``False`` mean
            fp32, ``True`` means bf16 (the older boolean settings).
        device: ``"cpu"``, ``"cuda"``, a ``torch.device`` or ``None``/``"auto"`` (CUDA when there
            is one).
        purpose: on a CPU without native bf16, forcing bf16 warns once for ``"training"`` (it
            runs, emulated and slow) and raises ``ValueError`` for ``"inference"``.
        flags: CPU flags to decide on (tests); default: this machine's.
    """
    if requested is None or requested is False or requested == "no":
        requested = "fp32"
    elif requested is True:
        requested = "bf16"
    if requested not in REQUESTS:
        raise ValueError(f"precision must be one of auto, fp32, bf16, fp16, got {requested!r}")
    kind = _device_type(device)
    if kind == "cuda":
        if requested == "auto":
            return "bf16" if _cuda_bf16() else "fp32"
        return requested  # type: ignore[return-value]
    native = cpu_has_bf16(flags)
    if requested == "auto":
        return "bf16" if native else "fp32"
    if requested == "fp16":
        raise ValueError("precision 'fp16' is for GPUs; on a CPU use 'bf16' (AVX-512 BF16 or AMX) or fp32")
    if requested == "bf16" and not native:
        if purpose == "inference":
            raise ValueError(
                f"precision 'bf16' needs a CPU with AVX-512 BF16 or AMX; this one is {cpu_class(flags)} "
                "(use fp32 or auto)"
            )
        _warn_once(
            ("bf16", purpose),
            f"bf16 on a {cpu_class(flags)} CPU without native bf16: it is emulated, "
            f"{EMULATED_BF16_SLOWDOWN}; 'auto' picks fp32 here",
        )
    return requested  # type: ignore[return-value]


def autocast_dtype(precision: Precision) -> str | None:
    """The ``dtype`` argument of :meth:`PrunerModel.predict` for a resolved precision."""
    return None if precision == "fp32" else precision


@dataclass(frozen=True)
class MachineInfo:
    """What a timing or a checkpoint was produced on; recorded in ``metrics.json``."""

    device: str
    cpu_class: str
    cpu_capability: str  # torch's view of the vector ISA its CPU kernels use
    native_bf16: bool
    gpu: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        if self.gpu:
            return f"GPU {self.gpu}"
        return f"CPU {self.cpu_class} ({'native' if self.native_bf16 else 'no native'} bf16)"


def machine_info(device=None) -> MachineInfo:
    """This machine's CPU class and torch capability (and GPU name when ``device`` is CUDA)."""
    import torch

    kind = _device_type(device)
    gpu = torch.cuda.get_device_name(0) if kind == "cuda" and torch.cuda.is_available() else None
    return MachineInfo(
        device=kind,
        cpu_class=cpu_class(),
        cpu_capability=str(torch.backends.cpu.get_cpu_capability()),
        native_bf16=cpu_has_bf16(),
        gpu=gpu,
    )
