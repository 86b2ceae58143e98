"""Backends answer one question: token and relevance logits for a padded batch.

Every backend takes ``{input_name: int64 array [batch, seq]}`` and returns
``(token_logits [batch, seq], relevance_logits [batch])`` as float32 numpy arrays, so the
pipeline in :mod:`inference.pruner` (windows, selection, results) is written once.
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
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, None: None}[dtype]
        self.input_names = ["input_ids", "attention_mask", "token_type_ids"]

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | None = None, dtype: str | None = None):
        from pruner_model import PrunerModel

        return cls(PrunerModel.from_pretrained(str(path)), device=device, dtype=dtype)

    def __call__(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        import torch

        inputs = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}
        with torch.inference_mode():
            if self.autocast_dtype is not None:
                with torch.autocast(self.device.type, dtype=self.autocast_dtype):
                    out = self.model(**inputs)
            else:
                out = self.model(**inputs)
        return (
            out.token_logits.float().cpu().numpy(),
            out.relevance_logits.float().cpu().numpy(),
        )
