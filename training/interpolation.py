"""Weight-space interpolation between a checkpoint and its fine-tuned copy: ``share`` of the
fine-tuned weights and the rest of the starting ones, every parameter alike (WiSE-FT, Wortsman
et al., 2022). Fine-tuning from one checkpoint keeps the two in one basin, so the blend is a
working model between them: closer to the start, it forgets less of what the checkpoint knew;
closer to the fine-tuned copy, it gains more on the new text. `pruner adapt`'s ``mix`` step
measures both sides at the shares :func:`search_shares` visits and keeps the one that gains most
on the user's text while losing at most an allowance on general text (:func:`choose_share`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

SHARES = (0.0, 1.0, 0.5, 0.25, 0.75)  # every share search_shares may visit; 0.0: the checkpoint as it was


def check_same_weights(start: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor]) -> None:
    """The two state dicts hold the same parameters in the same shapes (a one-line ValueError)."""
    if set(start) != set(tuned):
        extra = sorted(set(start) ^ set(tuned))
        raise ValueError(
            f"the fine-tuned model and its checkpoint hold different parameters ({len(extra)} differ, e.g. "
            f"{extra[0]}): they cannot be interpolated"
        )
    for name, w in start.items():
        if w.shape != tuned[name].shape:
            raise ValueError(
                f"{name} is {tuple(tuned[name].shape)} in the fine-tuned model and {tuple(w.shape)} in its "
                "checkpoint: they cannot be interpolated"
            )


def interpolated(
    start: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor], share: float
) -> dict[str, torch.Tensor]:
    """``(1 - share) * start + share * tuned`` for every floating parameter, computed in fp32 and
    returned in the fine-tuned model's dtypes; integer buffers (position ids) are the fine-tuned
    model's."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the share of fine-tuned weights must be in [0, 1], got {share}")
    check_same_weights(start, tuned)
    out = {}
    for name, t in tuned.items():
        if t.is_floating_point():
            out[name] = torch.lerp(start[name].to(t.device, torch.float32), t.float(), share).to(t.dtype)
        else:
            out[name] = t.clone()
    return out


@dataclass
class Measured:
    """One share measured: compression at the promise (threshold swept) on the user's calibration
    split and on general text."""

    share: float
    yours: float | None
    general: float | None


def choose_share(rows: list[Measured], allowance: float) -> tuple[float, str]:
    """The share whose compression on your text is highest among those that lose at most
    ``allowance`` of general text's compression against the checkpoint (share 0, always among
    them), and the reason in words. A share whose measurement is missing (no threshold reaches the
    promise) is never chosen over one that has it."""
    start = next((r for r in rows if r.share == 0.0), None)
    if start is None:
        raise ValueError("the shares measured must include 0.0 (the checkpoint as it was)")
    if start.general is None:
        best = max(rows, key=lambda r: (r.yours is not None, r.yours or 0.0, r.share))
        return best.share, "no compression at the promise on general text to hold: the best on yours"
    allowed = [r for r in rows if _holds(start, r, allowance)]
    best = max(allowed, key=lambda r: (r.yours is not None, r.yours or 0.0, r.share))
    lost = start.general - best.general
    change = (
        f"loses {lost:.3f}"
        if lost >= 0.0005
        else f"gains {-lost:.3f}"
        if lost <= -0.0005
        else "loses nothing"
    )
    return best.share, (
        f"the most compression on your calibration split ({_num(best.yours)}) among the shares that lose "
        f"at most {allowance:.3f} on general text (this one {change}: {best.general:.3f} against the "
        f"checkpoint's {start.general:.3f})"
    )


def search_shares(measure: Callable[[float], Measured], allowance: float) -> list[Measured]:
    """The shares worth measuring, measured: 0 (the checkpoint) and 1 (the fine-tuned weights); when
    1 loses more than ``allowance`` on general text, two halvings between the largest share known
    to hold and the smallest known not to (0.5, then 0.75 or 0.25). Forgetting shrinks as the share
    does, so the largest share that holds is found to a quarter in at most four measurements (two
    when the fine-tuned weights already hold)."""
    start, tuned = measure(0.0), measure(1.0)
    rows = [start, tuned]
    if start.general is None or _holds(start, tuned, allowance):
        return rows
    low, high = 0.0, 1.0
    for _ in range(2):
        r = measure((low + high) / 2)
        rows.append(r)
        low, high = (r.share, high) if _holds(start, r, allowance) else (low, r.share)
    return rows


def _holds(start: Measured, r: Measured, allowance: float) -> bool:
    """``r`` loses at most ``allowance`` of general text's compression against ``start``."""
    return r.general is not None and start.general - r.general <= allowance + 1e-12


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
