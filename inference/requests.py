"""What a prune call takes: a query, its passages and selection settings, checked up front."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pruner_model.core.segmentation import Unit, punkt_language, segment
from pruner_model.inference.settings import SelectionParams

PassageInput = str | Mapping[str, str]


@dataclass
class PruneRequest:
    """One query with its passages and its own selection settings."""

    query: str
    passages: Sequence[PassageInput] | PassageInput
    params: SelectionParams
    prepared: list | None = None  # the segmented passages, once ContextPruner.prepare() checked them
    forced: object = None  # numpy bool per unit: the units must_keep matched (prepare(), off the batcher)


@dataclass
class PreparedPassage:
    id: str
    title: str | None
    text: str
    units: list[Unit]


def check_text(text: str, what: str) -> None:
    """Text that cannot be encoded as UTF-8 (a lone surrogate) is a one-line ValueError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} is not valid Unicode text (lone surrogate at character {exc.start})"
        ) from None


def check_query(query) -> str:
    """The query, checked: a non-empty string of valid Unicode (else a one-line error)."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")
    if not query.strip():
        raise ValueError("query is empty")
    check_text(query, "query")
    return query


def prepare_passages(
    passages, language: str | None, structure: bool, default_language: str = "english"
) -> list[PreparedPassage]:
    """Passages (strings or ``{"id", "title", "text"}`` mappings, or one alone) checked through one
    path (ids are strings or integers, titles strings, every text valid Unicode) and segmented
    (``language`` None: punkt's parameters by each passage's script, else ``default_language``)."""
    if isinstance(passages, str | Mapping):
        passages = [passages]
    out = []
    for i, p in enumerate(passages):
        if isinstance(p, str):
            pid, title, text = str(i), None, p
        elif isinstance(p, Mapping):
            pid, title, text = _passage_fields(p, i)
        else:
            raise TypeError(f"passage {i} must be a string or a dict with 'text'")
        check_text(text, f"passage {i}")
        if title is not None:
            check_text(title, f"passage {i} title")
        lang = punkt_language(language, text, default_language)
        out.append(PreparedPassage(pid, title, text, segment(text, lang, structure)))
    return out


def _passage_fields(p: Mapping, i: int) -> tuple[str, str | None, str]:
    if not isinstance(p.get("text"), str):
        raise ValueError(f"passage {i} has no 'text' string")
    pid, title = p.get("id", i), p.get("title")
    if isinstance(pid, bool) or not isinstance(pid, str | int):
        raise TypeError(f"passage {i} id must be a string or an integer, got {type(pid).__name__}")
    if title is not None and not isinstance(title, str):
        raise TypeError(f"passage {i} title must be a string, got {type(title).__name__}")
    check_text(str(pid), f"passage {i} id")
    return str(pid), title, p["text"]
