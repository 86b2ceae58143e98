"""Backends answer one question: token and relevance logits for a padded batch.

Every backend takes ``{input_name: int64 array [batch, seq]}`` and returns
``(token_logits [batch, seq], relevance_logits [batch])`` as float32 numpy arrays, so the
pipeline in :mod:`pruner_model.inference.pruner` (windows, selection, results) is written once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import numpy as np
from pruner_model.core.precision import autocast_dtype, resolve_precision
from pruner_model.core.scoring import batch_tokens, call_tokens


@contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """transformers' weight-loading bars on or off for one load, restored after it (a library
    that loads a model prints nothing unless asked)."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.is_progress_bar_enabled()
    if enabled:
        hf_logging.enable_progress_bar()
    else:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()


class Backend(Protocol):
    input_names: list[str]
    name: str

    def __call__(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]: ...


class TorchBackend:
    """Runs a :class:`pruner_model.PrunerModel` in eval mode under ``torch.inference_mode``.

    ``dtype``: ``None`` or ``"fp32"`` (the weights' precision), ``"auto"`` (bf16 where it is
    native: a GPU with bf16, a CPU with AVX-512 BF16 or AMX; else fp32), ``"bf16"`` or ``"fp16"``
    (GPU only) under autocast. bf16 on a CPU without native bf16 is refused: it would be emulated,
    tens of times slower (:mod:`pruner_model.core.precision`)."""

    name = "torch"
    int8_to_time: Path | None = None  # a cached int8 export to time against (inference.loading)

    def __init__(self, model, device: str | None = None, dtype: str | None = None):
        import torch

        if device in (None, "auto"):
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        if dtype not in (None, "auto", "fp32", "bf16", "fp16"):
            raise ValueError(f"dtype must be None, 'auto', 'fp32', 'bf16' or 'fp16', got {dtype!r}")
        self.precision = resolve_precision(dtype, self.device, purpose="inference")
        self.dtype = autocast_dtype(self.precision)
        self.input_names = ["input_ids", "attention_mask", "token_type_ids"]
        self.batch_tokens = batch_tokens(self.device.type == "cpu")
        self.call_tokens = call_tokens(self.device.type == "cpu")

    def set_precision(self, precision: str) -> None:
        """Run in ``precision`` from the next batch on (``"fp32"``, or ``"bf16"`` where native)."""
        self.precision = resolve_precision(precision, self.device, purpose="inference")
        self.dtype = autocast_dtype(self.precision)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        device: str | None = None,
        dtype: str | None = None,
        show_progress_bar: bool = False,
    ):
        from pruner_model.core.modeling import PrunerModel

        with progress_bars(show_progress_bar):
            model = PrunerModel.from_pretrained(str(path))
        return cls(model, device=device, dtype=dtype)

    def __call__(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        return self.model.predict(batch, dtype=self.dtype)
