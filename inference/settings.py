"""Every selection setting, defined once in :class:`SelectionParams` with its default, one line of
help and its bounds; the CLI flags (``pruner prune``) and the HTTP body fields (``pruner serve``)
are generated from it here, so the three cannot drift."""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Literal

import numpy as np
import regex
from pruner_model.core.score_rules import check_relative_floor

CHECKPOINT = "checkpoint"  # a knob's value that means "the checkpoint's calibrated setting"


def _knob(default, help: str, ge: float | None = None, le: float | None = None):
    """A selection setting: its default, one line of help (CLI ``--help``, server schema, docs)
    and its bounds. The CLI flags and the HTTP request body are derived from these fields."""
    return field(default=default, metadata={"help": help, "ge": ge, "le": le})


MAX_MUST_KEEP = 16  # patterns per request

MAX_KNOB_INTEGER = 10**15  # no knob means anything past this; larger integers are refused before any float

# USD per million input tokens: far above any model's price, far below where sums overflow
MAX_PRICE_PER_MILLION = 1e6


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
        None,
        "keep units scoring at least this (default: the checkpoint's per-request threshold, else its calibrated one)",
        0.0,
        1.0,
    )
    operating_point: str | None = _knob(
        None,
        "a named operating point of the checkpoint instead of its threshold and relative floor: the "
        "pair calibrated to keep the target on one calibration source alone, e.g. nq (the model "
        "card lists them)",
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
    continuation: float | None = _knob(
        None,
        "answers over several sentences: a unit next to a kept one, same paragraph, is kept too "
        "when it scores at least this share of the threshold, along the run (e.g. 0.3)",
        0.0,
        1.0,
    )
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
    budget_tokenizer: str | Callable | None = _knob(
        None,
        "count budgets and stats in this tokenizer's tokens: a tiktoken encoding (cl100k_base), a "
        "Hugging Face tokenizer folder or hub id, or (Python) a callable; default: the pruner's own",
    )
    language: str | None = _knob(
        None,
        "punkt's parameters for Latin-script prose: a punkt name or ISO 639-1 code (de, french); "
        "default: by script (Cyrillic, Greek, Malayalam), else the checkpoint's. CJK, Hindi, Arabic "
        "and Thai are cut by their own marks in any case",
    )
    summarize: bool = _knob(
        False,
        "summarize the middle tier (units scoring between summary_threshold and the threshold) "
        "with the pruner's summarizer instead of dropping it",
    )
    summary_threshold: float | None = _knob(
        None,
        "lower edge of the middle tier (default: the checkpoint's calibrated summary_threshold, "
        "else a quarter of the threshold)",
        0.0,
        1.0,
    )
    price_per_million_tokens: float | None = _knob(
        None,
        "the generator's input price (USD per million tokens): stats then carry the money saved",
        0.0,
        MAX_PRICE_PER_MILLION,
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
            compile_pattern(pattern)

    def with_request_threshold(self, threshold: float, min_relevance: float | None = None) -> SelectionParams:
        """These resolved settings with the checkpoint's per-request ``threshold`` filled in (the
        middle tier's lower edge never above it) and its passage relevance gate, where the
        request left ``min_relevance`` unset."""
        out = copy.copy(self)
        object.__setattr__(out, "threshold", float(threshold))
        if self.min_relevance is None and min_relevance is not None:
            object.__setattr__(out, "min_relevance", float(min_relevance))
        if self.summarize:
            summary = self.summary_threshold
            summary = threshold / 4 if summary is None else min(summary, threshold)
            object.__setattr__(out, "summary_threshold", summary)
        return out

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
        floor = (
            getattr(config, "relative_floor", None)
            if self.relative_floor == CHECKPOINT
            else self.relative_floor
        )
        # left to the checkpoint, under its own rule: its per-request threshold, which selection
        # computes from the request itself (threshold stays None until then)
        per_request = (
            self.threshold is None
            and self.operating_point is None
            and self.relative_floor in (CHECKPOINT, getattr(config, "relative_floor", None))
            and getattr(config, "threshold_model", None) is not None
        )
        threshold = None if per_request else config.threshold if self.threshold is None else self.threshold
        if self.operating_point is not None:
            threshold, floor = _named_point(config, self.operating_point, self.threshold, self.relative_floor)
        resolved = {
            "threshold": threshold,
            "relative_floor": floor,
            "uncertain_below": getattr(config, "uncertainty_threshold", None)
            if self.uncertain_below == CHECKPOINT
            else self.uncertain_below,
        }
        if self.summarize and self.summary_threshold is None:
            # the calibrated middle tier is on the checkpoint's own scale, not a named point's
            calibrated = None if self.operating_point else getattr(config, "summary_threshold", None)
            resolved["summary_threshold"] = (
                calibrated
                if calibrated is not None
                else None
                if resolved["threshold"] is None  # a quarter of the request's own threshold
                else resolved["threshold"] / 4
            )
        if all(getattr(self, k) == v for k, v in resolved.items()):
            return self
        # validated when set; the checkpoint's values were checked when its config was loaded,
        # so this copy skips __post_init__ (per-request cost on the serving path)
        out = copy.copy(self)
        for k, v in resolved.items():
            object.__setattr__(out, k, v)
        return out


def _named_point(config, name: str, threshold, floor) -> tuple[float, float | None]:
    """The threshold and relative floor of the checkpoint's operating point ``name`` (a one-line
    error naming the ones it has when it has no such point, or when another threshold or floor is
    also given: the point's threshold holds under its own floor only)."""
    points = getattr(config, "operating_points", None) or {}
    if name not in points:
        have = (
            f"it has: {', '.join(sorted(points))}"
            if points
            else "it has none (training names them, one per calibration source)"
        )
        raise ValueError(
            f"operating_point {name!r} is not one of this checkpoint's named operating points; {have}"
        )
    point = points[name]
    if threshold is not None and threshold != point["threshold"]:
        raise ValueError("give threshold or operating_point, not both")
    if floor != CHECKPOINT and floor != point["relative_floor"]:
        raise ValueError(
            "operating_point sets the relative floor its threshold was calibrated with: leave relative_floor out"
        )
    return float(point["threshold"]), point["relative_floor"]


def _check_knob(f, value) -> None:
    name, lo, hi, kind = f.name, f.metadata["ge"], f.metadata["le"], _field_kind(f)
    if kind == "bool":
        if not isinstance(value, bool | np.bool_):
            raise ValueError(f"{name} must be true or false, got {value!r}")
        return
    if kind == "patterns":
        return
    if kind == "name":
        from pruner_model.core.configuration import POINT_NAME_MAX_CHARS, is_point_name

        if not is_point_name(value):
            raise ValueError(f"{name} must be a name of 1-{POINT_NAME_MAX_CHARS} characters, got {value!r}")
        return
    if kind == "tokenizer":
        from pruner_model.inference.budget import check_budget_tokenizer

        check_budget_tokenizer(value)
        return
    if kind == "choice":
        choices = typing.get_args(typing.get_type_hints(SelectionParams)[name])
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return
    integer = kind == "int"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if isinstance(value, numbers.Integral) and abs(value) > MAX_KNOB_INTEGER:  # past float range too
        raise ValueError(f"{name} must be at most {MAX_KNOB_INTEGER:.0e} in size, got a larger number")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if integer and value != int(value):
        raise ValueError(f"{name} must be a whole number, got {value}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {bounds}, got {value}")


@lru_cache(maxsize=256)
def compile_pattern(pattern: str):
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


# ---------------------------------------------------------------------------- derived interfaces
def _field_kind(f) -> str:
    """bool | patterns | choice | tokenizer | name | floor | int | float, from the field's annotation."""
    typ = str(f.type)
    if "Callable" in typ:
        return "tokenizer"
    if typ == "str | None":
        return "name"
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
            conv = {"int": int, "float": float, "floor": _parse_floor, "tokenizer": str, "name": str}[kind]
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
        "tokenizer": StrictStr,
        "name": StrictStr,
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
