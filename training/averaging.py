"""An exponential moving average of the trainable weights, evaluated and published in place of
the last step's weights (``train.ema_decay``).

The average is bias-corrected: it starts empty rather than at the initial weights, so after ``t``
updates it is the weighted mean of the ``t`` weights visited, each ``decay`` times the weight of
the one after it (about the last ``1 / (1 - decay)`` steps), with no share left to the fresh
heads' random start.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import torch

FILE = "weight_average.safetensors"


class WeightAverage:
    def __init__(self, model: torch.nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay, self.updates = decay, 0
        # fp32 copies: a bf16 average would round away the small steps it averages
        self.shadow = {n: p.detach().float().clone() for n, p in model.named_parameters() if p.requires_grad}

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        """Fold the model's current weights in (once per optimizer step)."""
        self.updates += 1
        d, t = self.decay, self.updates
        keep = d * (1 - d ** (t - 1)) / (1 - d**t)  # bias-corrected: 0 at the first update
        for n, p in model.named_parameters():
            if n in self.shadow:
                self.shadow[n].lerp_(p.detach().float(), 1.0 - keep)

    @contextmanager
    def swapped_in(self, model: torch.nn.Module):
        """The averaged weights in ``model`` for the duration; its own weights back afterwards."""
        params = dict(model.named_parameters())
        saved = {n: params[n].detach().clone() for n in self.shadow}
        with torch.no_grad():
            for n, avg in self.shadow.items():
                params[n].copy_(avg)
        try:
            yield model
        finally:
            with torch.no_grad():
                for n, w in saved.items():
                    params[n].copy_(w)

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        save_file(self.shadow, str(Path(folder) / FILE), metadata={"updates": str(self.updates)})

    def load(self, folder: Path) -> None:
        """The average saved with the resumable state in ``folder``."""
        from safetensors import safe_open

        path = Path(folder) / FILE
        with safe_open(str(path), framework="pt") as fh:
            names = set(fh.keys())
            if names != set(self.shadow):
                raise ValueError(f"{path} averages other weights than this model trains")
            for n in names:
                self.shadow[n] = fh.get_tensor(n).float()
            self.updates = int(fh.metadata()["updates"])
