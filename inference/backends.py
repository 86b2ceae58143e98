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
        self.dtype = dtype
        self.input_names = ["input_ids", "attention_mask", "token_type_ids"]

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | None = None, dtype: str | None = None):
        from pruner_model import PrunerModel

        return cls(PrunerModel.from_pretrained(str(path)), device=device, dtype=dtype)

    def __call__(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        return self.model.predict(batch, dtype=self.dtype)
