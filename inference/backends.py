"""Backends answer one question: token and relevance logits for a padded batch.

Every backend takes ``{input_name: int64 array [batch, seq]}`` and returns
``(token_logits [batch, seq], relevance_logits [batch])`` as float32 numpy arrays, so the
pipeline in :mod:`pruner_model.inference.pruner` (windows, selection, results) is written once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np


class Backend(Protocol):
    input_names: list[str]
    name: str

    def __call__(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]: ...


def cpu_has_bf16() -> bool:
    """Whether this CPU has native bf16 matrix instructions (AVX-512 BF16 or AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="ignore")
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


class TorchBackend:
    """Runs a :class:`pruner_model.PrunerModel` in eval mode under ``torch.inference_mode``."""

    name = "torch"

    def __init__(self, model, device: str | None = None, dtype: str | None = None):
        import torch

        if device in (None, "auto"):
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        if dtype not in (None, "bf16", "fp16"):
            raise ValueError(f"dtype must be None, 'bf16' or 'fp16', got {dtype!r}")
        if self.device.type == "cpu" and dtype == "fp16":
            raise ValueError("dtype 'fp16' is for GPUs; on a CPU use 'bf16' (AVX-512 BF16 or AMX) or fp32")
        if self.device.type == "cpu" and dtype == "bf16" and not cpu_has_bf16():
            raise ValueError(
                "dtype 'bf16' needs a CPU with AVX-512 BF16 or AMX; this one has neither (use fp32)"
            )
        self.dtype = dtype
        self.input_names = ["input_ids", "attention_mask", "token_type_ids"]

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | None = None, dtype: str | None = None):
        from pruner_model import PrunerModel

        return cls(PrunerModel.from_pretrained(str(path)), device=device, dtype=dtype)

    def __call__(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        return self.model.predict(batch, dtype=self.dtype)
