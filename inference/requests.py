"""What a prune call takes: a query, its passages and selection settings, checked up front."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pruner_model.segmentation import Unit

from .selection import SelectionParams

PassageInput = str | Mapping[str, str]


@dataclass
class PruneRequest:
    """One query with its passages and its own selection settings."""

    query: str
    passages: Sequence[PassageInput] | PassageInput
    params: SelectionParams
    prepared: list | None = None  # the segmented passages, once ContextPruner.prepare() checked them


@dataclass
class _Passage:
    id: str
    title: str | None
    text: str
    units: list[Unit]


def _check_text(text: str, what: str) -> None:
    """Text that cannot be encoded as UTF-8 (a lone surrogate) is a one-line ValueError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} is not valid Unicode text (lone surrogate at character {exc.start})"
        ) from None
