"""Selection steps over the units of one query's passages, each a small function on arrays.

All steps take and return a boolean ``keep`` mask over the units of every passage of a query
(flattened in document order) so they compose freely; :func:`select` chains them in the order
the pruner applies them.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
import re
import time
import typing
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Literal

import numpy as np
import regex

from pruner_model.metrics import check_relative_floor, relative_scores

_WS = re.compile(r"\s+")


@dataclass
class Units:
    """The flattened units of one query's passages."""

    scores: np.ndarray  # [n] float sentence scores
    passage: np.ndarray  # [n] passage index of each unit
    paragraph: np.ndarray  # [n] paragraph number inside its passage
    heading: np.ndarray  # [n] global index of the unit's section heading, -1 if none
    tokens: np.ndarray  # [n] tokens of each unit
    texts: list[str]  # [n] unit texts (for duplicate detection)
    relevance: np.ndarray  # [n_passages] passage relevance probabilities

    def __len__(self) -> int:
        return len(self.scores)


def apply_threshold(units: Units, threshold: float, relative_floor: float | None = None) -> np.ndarray:
    """Units whose score (relative to the request's best, see ``relative_scores``) is ``>= threshold``."""
    return relative_scores(units.scores, relative_floor) >= threshold


def gate_passages(units: Units, keep: np.ndarray, min_relevance: float | None) -> np.ndarray:
    """Drop every unit of a passage whose relevance probability is under ``min_relevance``."""
    if min_relevance is None or not len(units):
        return keep
    return keep & (units.relevance[units.passage] >= min_relevance)


def keep_top(units: Units, keep: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` best-scored units survive whatever the other steps decided."""
    if k <= 0 or not len(units):
        return keep
    keep = keep.copy()
    keep[np.argsort(-units.scores, kind="stable")[:k]] = True
    return keep


def expand_neighbors(units: Units, keep: np.ndarray, n: int) -> np.ndarray:
    """Also keep up to ``n`` units on each side of a kept unit, inside the same paragraph."""
    if n <= 0 or not len(units):
        return keep
    n = min(n, len(units))  # farther than the whole query's units changes nothing
    group = units.passage.astype(np.int64) * (1 << 32) + units.paragraph
    out = keep.copy()
    for d in range(1, n + 1):
        same = group[d:] == group[:-d]
        out[d:] |= keep[:-d] & same  # the unit d after a kept one
        out[:-d] |= keep[d:] & same  # the unit d before a kept one
    return out


def keep_headings(units: Units, keep: np.ndarray) -> np.ndarray:
    """A kept unit keeps the heading of its section (and that heading its own, recursively)."""
    out = keep.copy()
    frontier = np.flatnonzero(out)
    while len(frontier):
        parents = units.heading[frontier]
        parents = parents[(parents >= 0) & ~out[np.clip(parents, 0, None)]]
        parents = np.unique(parents)
        out[parents] = True
        frontier = parents
    return out


def normalize(text: str) -> str:
    return _WS.sub(" ", text).strip().lower()


def drop_duplicates(units: Units, keep: np.ndarray) -> tuple[np.ndarray, int]:
    """Kept units whose whitespace-normalized text was already kept are dropped (first wins)."""
    out = keep.copy()
    seen: set[str] = set()
    removed = 0
    for i in np.flatnonzero(keep):
        key = normalize(units.texts[i])
        if key in seen:
            out[i] = False
            removed += 1
        else:
            seen.add(key)
    return out, removed


def pack_budget(
    units: Units,
    keep: np.ndarray,
    budget: int | None,
    per_passage: int | None = None,
    priority: np.ndarray | None = None,
) -> np.ndarray:
    """Greedy packing: kept units by descending score (``priority`` units first) while they fit
    ``budget`` tokens in all and ``per_passage`` tokens in each passage. Units that do not fit
    are skipped, smaller ones after them may still fit. Document order is untouched (a mask)."""
    if budget is None and per_passage is None:
        return keep
    out = np.zeros_like(keep)
    total = 0
    used: dict[int, int] = {}
    idx = np.flatnonzero(keep)
    first = np.zeros(len(idx)) if priority is None else -priority[idx].astype(np.float64)
    for i in idx[np.lexsort((-units.scores[idx], first))]:
        t = int(units.tokens[i])
        p = int(units.passage[i])
        if budget is not None and total + t > budget:
            continue
        if per_passage is not None and used.get(p, 0) + t > per_passage:
            continue
        out[i] = True
        total += t
        used[p] = used.get(p, 0) + t
    return out


CHECKPOINT = "checkpoint"  # a knob's value that means "the checkpoint's calibrated setting"


def _knob(default, help: str, ge: float | None = None, le: float | None = None):
    """A selection setting: its default, one line of help (CLI ``--help``, server schema, docs)
    and its bounds. The CLI flags and the HTTP request body are derived from these fields."""
    return field(default=default, metadata={"help": help, "ge": ge, "le": le})


MAX_MUST_KEEP = 16  # patterns per request
MAX_PATTERN_CHARS = 200
# seconds that one prune call's must_keep patterns may run over all its units together: a pattern
# that backtracks catastrophically ((a+)+$) is stopped there with a clear error, not left to hang
MUST_KEEP_SECONDS = 1.0


@dataclass(frozen=True)
class SelectionParams:
    """Every knob of sentence selection, defined once.

    ``ContextPruner.prune(query, passages, params=None, **overrides)`` takes them as keyword
    overrides, ``pruner prune`` as flags (``--token-budget``, ``--no-dedup``, ``--must-keep`` ...)
    and ``POST /v1/prune`` as body fields of the same names. Steps run in :func:`select`'s order.
    """

    threshold: float | None = _knob(
        None, "keep units scoring at least this (default: the checkpoint's calibrated threshold)", 0.0, 1.0
    )
    relative_floor: float | str | None = _knob(
        CHECKPOINT,
        "divide scores by max(floor, the query's best score) before the threshold; 'none': absolute "
        "scores (default: the checkpoint's)",
        0.0,
        1.0,
    )
    token_budget: int | None = _knob(None, "at most this many kept tokens over all passages", 0)
    per_passage_budget: int | None = _knob(None, "at most this many kept tokens in each passage", 0)
    neighbors: int = _knob(0, "also keep up to N units on each side of a kept one, same paragraph", 0, 64)
    keep_top: int = _knob(0, "always keep the N best-scored units", 0)
    min_relevance: float | None = _knob(None, "drop passages whose relevance probability is lower", 0.0, 1.0)
    must_keep: tuple[str, ...] = _knob(
        (), "regular expressions: a unit matching one is kept (ids, numbers, error codes)"
    )
    keep_headings: bool = _knob(True, "a kept unit keeps the heading of its section")
    dedup: bool = _knob(True, "drop kept units whose text was already kept")
    uncertain_below: float | str | None = _knob(
        CHECKPOINT,
        "a query whose best unit scores under this is uncertain; 'none': never (default: the "
        "checkpoint's calibrated value)",
        0.0,
        1.0,
    )
    if_uncertain: Literal["flag", "keep_all"] = _knob(
        "flag", "an uncertain query is only flagged in stats, or keeps every unit (the unpruned context)"
    )
    price_per_million_tokens: float | None = _knob(
        None, "the generator's input price (USD per million tokens): stats then carry the money saved", 0.0
    )

    def __post_init__(self) -> None:
        for f in fields(self):  # 'none' (as the help and the CLI spell it) is None
            value = getattr(self, f.name)
            if _field_kind(f) == "floor" and isinstance(value, str) and value.strip().lower() == "none":
                object.__setattr__(self, f.name, None)
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or (_field_kind(f) == "floor" and value == CHECKPOINT):
                continue
            _check_knob(f, value)
        if self.relative_floor not in (None, CHECKPOINT):
            check_relative_floor(self.relative_floor)
        if isinstance(self.must_keep, str) or not isinstance(self.must_keep, tuple | list):
            raise ValueError("must_keep must be a list of regular expressions")
        object.__setattr__(self, "must_keep", tuple(self.must_keep))
        if len(self.must_keep) > MAX_MUST_KEEP:
            raise ValueError(f"must_keep takes at most {MAX_MUST_KEEP} patterns, got {len(self.must_keep)}")
        for pattern in self.must_keep:
            _compile(pattern)

    def replace(self, **overrides) -> SelectionParams:
        """A copy with ``overrides`` (unknown names are a one-line error)."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise TypeError(f"unknown selection setting {unknown[0]!r}; known: {', '.join(sorted(names))}")
        return dataclasses.replace(self, **overrides)

    def resolve(self, config) -> SelectionParams:
        """The settings with the checkpoint's calibrated values (``config``: a PrunerConfig)
        filled in where they were left to it."""
        resolved = {
            "threshold": config.threshold if self.threshold is None else self.threshold,
            "relative_floor": getattr(config, "relative_floor", None)
            if self.relative_floor == CHECKPOINT
            else self.relative_floor,
            "uncertain_below": getattr(config, "uncertainty_threshold", None)
            if self.uncertain_below == CHECKPOINT
            else self.uncertain_below,
        }
        if all(getattr(self, k) == v for k, v in resolved.items()):
            return self
        # validated when set; the checkpoint's values were checked when its config was loaded,
        # so this copy skips __post_init__ (per-request cost on the serving path)
        out = copy.copy(self)
        for k, v in resolved.items():
            object.__setattr__(out, k, v)
        return out


def _check_knob(f, value) -> None:
    name, lo, hi, kind = f.name, f.metadata["ge"], f.metadata["le"], _field_kind(f)
    if kind == "bool":
        if not isinstance(value, bool | np.bool_):
            raise ValueError(f"{name} must be true or false, got {value!r}")
        return
    if kind == "patterns":
        return
    if kind == "choice":
        choices = typing.get_args(typing.get_type_hints(SelectionParams)[name])
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return
    integer = kind == "int"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if integer and value != int(value):
        raise ValueError(f"{name} must be a whole number, got {value}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {bounds}, got {value}")


@lru_cache(maxsize=256)
def _compile(pattern: str):
    """``pattern`` compiled by the ``regex`` engine in ``re``-compatible mode (V0), which can stop
    a match after a timeout and releases the GIL while it runs."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"must_keep patterns must be non-empty strings, got {pattern!r}")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"must_keep pattern over {MAX_PATTERN_CHARS} characters")
    try:
        return regex.compile(pattern, flags=regex.V0)
    except (regex.error, ValueError, OverflowError) as exc:
        raise ValueError(f"must_keep pattern {pattern!r} is not a valid regular expression: {exc}") from None


def must_keep(
    units: Units, keep: np.ndarray, patterns: tuple[str, ...], seconds: float = MUST_KEEP_SECONDS
) -> np.ndarray:
    """Units whose text matches one of ``patterns`` (``re.search`` semantics) are kept.

    Raises:
        ValueError: the patterns ran over ``seconds`` on these units together (catastrophic
            backtracking, e.g. ``(a+)+$``); nothing is left running.
    """
    if not patterns or not len(units):
        return keep
    compiled = [_compile(p) for p in patterns]
    stop = time.monotonic() + seconds
    hits = np.zeros(len(units), dtype=bool)
    for c, pattern in zip(compiled, patterns):
        for i, text in enumerate(units.texts):
            if hits[i]:
                continue
            left = stop - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                hits[i] = c.search(text, timeout=left, concurrent=True) is not None
            except TimeoutError:
                raise ValueError(
                    f"must_keep pattern {pattern!r} ran over {seconds:g} s on this text "
                    "(catastrophic backtracking?): simplify it"
                ) from None
    return keep | hits


def uncertainty(units: Units, below: float | str | None) -> tuple[float, bool]:
    """``(confidence, uncertain)`` of one query: its best unit score, and whether that is under
    ``below`` (no sentence stands out, so the answer may be among the dropped ones)."""
    confidence = float(units.scores.max()) if len(units) else 0.0
    return confidence, below not in (None, CHECKPOINT) and confidence < float(below)


def select(units: Units, params: SelectionParams) -> tuple[np.ndarray, int]:
    """Threshold → passage gate → must_keep → keep_top → neighbours → headings → dedup → budget;
    with ``if_uncertain="keep_all"``, an uncertain query (see :func:`uncertainty`) keeps everything.

    ``params`` needs a threshold (``ContextPruner`` fills in the checkpoint's); a relative floor
    left at ``"checkpoint"`` means absolute scores here, where there is no checkpoint. Returns the
    keep mask and the number of duplicate units removed. Budget packing takes ``must_keep`` units
    first, then the others by score.
    """
    if params.threshold is None:
        raise ValueError("select() needs a threshold (ContextPruner fills in the checkpoint's)")
    floor = None if params.relative_floor == CHECKPOINT else params.relative_floor
    if params.if_uncertain == "keep_all" and uncertainty(units, params.uncertain_below)[1]:
        return np.ones(len(units), dtype=bool), 0
    keep = apply_threshold(units, params.threshold, floor)
    keep = gate_passages(units, keep, params.min_relevance)
    forced = must_keep(units, np.zeros(len(units), dtype=bool), params.must_keep)
    keep = keep | forced
    keep = keep_top(units, keep, params.keep_top)
    keep = expand_neighbors(units, keep, params.neighbors)
    if params.keep_headings:
        keep = keep_headings(units, keep)
    removed = 0
    if params.dedup:
        keep, removed = drop_duplicates(units, keep)
    keep = pack_budget(units, keep, params.token_budget, params.per_passage_budget, priority=forced)
    return keep, removed


def merge_spans(starts: np.ndarray, ends: np.ndarray, scores: np.ndarray, keep: np.ndarray):
    """Adjacent kept units of one passage merged into ``(start, end, score)`` spans."""
    spans = []
    idx = np.flatnonzero(keep)
    if not len(idx):
        return spans
    breaks = np.flatnonzero(np.diff(idx) > 1) + 1
    for run in np.split(idx, breaks):
        spans.append((int(starts[run[0]]), int(ends[run[-1]]), float(scores[run].max())))
    return spans


# ---------------------------------------------------------------------------- derived interfaces
def _field_kind(f) -> str:
    """bool | patterns | choice | floor | int | float, from the field's annotation."""
    typ = str(f.type)
    if typ.startswith("Literal"):
        return "choice"
    if typ == "bool":
        return "bool"
    if typ.startswith("tuple[str"):
        return "patterns"
    if "str" in typ:
        return "floor"
    return "int" if typ.startswith("int") else "float"


def _parse_floor(text: str) -> float | str | None:
    if text.lower() == "none":
        return None
    if text.lower() == CHECKPOINT:
        return CHECKPOINT
    return float(text)


def add_selection_arguments(parser) -> None:
    """One ``--flag`` per :class:`SelectionParams` field (``--no-X`` for the boolean ones)."""
    import argparse

    group = parser.add_argument_group("selection (SelectionParams)")
    for f in fields(SelectionParams):
        flag = "--" + f.name.replace("_", "-")
        help = f.metadata["help"]
        kind = _field_kind(f)
        if kind == "bool":
            group.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help
            )
        elif kind == "patterns":
            group.add_argument(flag, dest=f.name, action="append", default=None, metavar="REGEX", help=help)
        elif kind == "choice":
            choices = typing.get_args(typing.get_type_hints(SelectionParams)[f.name])
            group.add_argument(flag, dest=f.name, choices=choices, default=None, help=help)
        else:
            conv = {"int": int, "float": float, "floor": _parse_floor}[kind]
            group.add_argument(flag, dest=f.name, type=conv, default=None, help=help)


def selection_overrides(args) -> dict:
    """The :class:`SelectionParams` fields set on the command line (see
    :func:`add_selection_arguments`)."""
    return {
        f.name: getattr(args, f.name) for f in fields(SelectionParams) if getattr(args, f.name) is not None
    }


def selection_body_fields() -> dict:
    """Pydantic field definitions of every :class:`SelectionParams` field, for the HTTP request
    body (``create_model(..., **selection_body_fields())``): absent means the default."""
    from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

    # strict: "5" is not a token budget and "yes" not a boolean, as in the Python API
    types = {
        "bool": StrictBool,
        "patterns": list[StrictStr],
        "int": StrictInt,
        "float": StrictFloat,
        "floor": StrictFloat | StrictStr,
    }
    hints = typing.get_type_hints(SelectionParams)
    out = {}
    for f in fields(SelectionParams):
        kind = _field_kind(f)
        typ = hints[f.name] if kind == "choice" else types[kind]
        if f.default is None or kind == "floor":
            typ = typ | None
        default = list(f.default) if kind == "patterns" else f.default
        out[f.name] = (typ, Field(default=default, description=f.metadata["help"]))
    return out
