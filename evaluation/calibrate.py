"""The one calibration of a checkpoint's operating point: named slices of scored groups and a
:class:`CalibrationRule` in, a frozen :class:`Calibration` out (:func:`calibrate`), and
:meth:`Calibration.write` the one place that stores calibrated values in a config: training's
calibration, ``pruner evaluate --write-threshold`` / ``--write-operating-point`` and the int8
export all write through it.

The threshold searches it runs are :mod:`pruner_model.evaluation.calibration`'s (one threshold
that keeps the target on every slice, the floor and exponent chosen with it) and
:mod:`pruner_model.evaluation.threshold_fit`'s (the per-request threshold).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

import numpy as np
from pruner_model.core.threshold_model import ThresholdModel
from pruner_model.evaluation.calibration import calibrate_operating_point, slices_threshold
from pruner_model.evaluation.groups import LabeledGroup
from pruner_model.evaluation.metrics import ScoredGroup, relative_groups, weighted_groups
from pruner_model.evaluation.threshold_fit import NOVELTY, UNFAMILIAR_GATE, RequestDefault

logger = logging.getLogger(__name__)

SliceKind = Literal["dev", "shift", "source"]

# a source's own operating point is fitted on its calibration queries alone: with fewer than this
# many that have evidence, the kept share's 95% interval is wider than about +-0.03 at 0.95 and
# the point would promise what its groups cannot show (docs/bring-your-own-corpus.md)
MIN_POINT_QUERIES = 200


@dataclass(frozen=True)
class CalibrationSlice:
    """One kind of text the promise must hold on: the calibration groups themselves (``dev``), a
    shifted copy of them (``shift``: mined, noisy, ...) or a calibration source's groups
    (``source``), labeled (``groups``) and scored (``scored``, raw scores)."""

    name: str
    kind: SliceKind
    groups: list[LabeledGroup]
    scored: list[ScoredGroup]

    @property
    def label(self) -> str:
        """The slice's name in reports and metrics (``source:<name>`` for a source)."""
        return f"source:{self.name}" if self.kind == "source" else self.name

    @property
    def queries(self) -> int:
        """Queries with evidence (the ones a threshold can be calibrated on)."""
        return sum(g.has_evidence for g in self.scored)


@dataclass(frozen=True)
class CalibrationRule:
    """What :func:`calibrate` aims for and compares: training's ``calibration:`` section has the
    same fields (docs/training-config.md says what each does)."""

    target_evidence: float = 0.97
    margin: float = 0.0
    relative_floors: tuple[float, ...] = ()
    relevance_exponents: tuple[float, ...] = ()
    relevance_contrast: float = 0.0
    folds: int = 5
    confidence: float | None = None
    slice_tolerance: float = 0.0
    choose_by: str = "threshold"
    per_request: bool = True
    per_request_bands: int = 8
    per_request_answer_shares: tuple[float, ...] = ()
    per_request_novelty: tuple[float, float] | None = NOVELTY
    unfamiliar_gate: float | None = UNFAMILIAR_GATE
    uncertain_share: float = 0.1
    summary_target: float | None = 0.99

    @classmethod
    def of(cls, section) -> CalibrationRule:
        """The rule of any object with these fields (training's ``CalibrationSection``)."""
        values = {f.name: getattr(section, f.name) for f in fields(cls)}
        values["relative_floors"] = tuple(values["relative_floors"])
        values["relevance_exponents"] = tuple(values["relevance_exponents"])
        values["per_request_answer_shares"] = tuple(values["per_request_answer_shares"])
        if values["per_request_novelty"] is not None:
            values["per_request_novelty"] = tuple(values["per_request_novelty"])
        return cls(**values)

    @property
    def aim(self) -> float:
        """The evidence share the threshold is calibrated for: the target plus the margin."""
        return min(1.0, self.target_evidence + self.margin)


@dataclass(frozen=True)
class Calibration:
    """Calibrated values for a checkpoint's config. A field left None is not written, except
    after a full calibration (``complete``), which replaces every calibrated field. What
    :func:`calibrate` compared on the way (``candidates``, ``slice_thresholds``, each slice's
    per-request default) is reported, never written."""

    threshold: float | None = None
    int8_threshold: float | None = None
    target_evidence: float | None = None
    relative_floor: float | None = None
    relevance_exponent: float | None = None
    relevance_contrast: float | None = None
    operating_points: dict[str, dict] | None = None
    threshold_model: ThresholdModel | None = None
    uncertainty_threshold: float | None = None
    summary_threshold: float | None = None
    complete: bool = False
    # reported only
    calibrated_for: float | None = None
    absolute_threshold: float | None = None
    slice_thresholds: dict[str, float] = field(default_factory=dict)
    candidates: tuple[dict, ...] = ()
    defaults: dict[str, RequestDefault] = field(default_factory=dict)

    def write(self, config) -> None:
        """Store the calibrated values in ``config`` (a :class:`PrunerConfig`). A new one
        threshold replaces the per-request threshold (fitted around the old one); named
        operating points are added to the config's (one of the same name replaced)."""
        if self.complete:
            config.relevance_contrast = self.relevance_contrast
            config.relative_floor = self.relative_floor
            config.threshold = self.threshold
            config.relevance_exponent = self.relevance_exponent
            config.target_evidence = self.target_evidence
            config.operating_points = self.operating_points
            config.threshold_model = None if self.threshold_model is None else self.threshold_model.to_dict()
            config.uncertainty_threshold = self.uncertainty_threshold
            config.summary_threshold = self.summary_threshold
            return
        for name in ("threshold", "int8_threshold", "target_evidence"):
            if getattr(self, name) is not None:
                setattr(config, name, getattr(self, name))
        if self.threshold is not None and self.threshold_model is None:
            config.threshold_model = None
        if self.operating_points:
            config.operating_points = {**(config.operating_points or {}), **self.operating_points}

    def save(self, model_dir: str | Path) -> None:
        """:meth:`write` into ``model_dir/config.json`` (a checkpoint or an ONNX export), replaced
        only once written whole."""
        from pruner_model.core.configuration import PrunerConfig, save_config

        config = PrunerConfig.from_pretrained(str(model_dir))
        self.write(config)
        save_config(config, model_dir)

    @property
    def score_rule(self) -> tuple[float, float | None, float]:
        """``(relevance_exponent, relative_floor, relevance_contrast)``, as the evaluation's score
        rules take them."""
        return (self.relevance_exponent or 0.0, self.relative_floor, self.relevance_contrast or 0.0)


def calibrate(
    slices: list[CalibrationSlice], rule: CalibrationRule, dev_name: str = "dev", log: bool = True
) -> Calibration:
    """The operating point that keeps ``rule.aim`` of the evidence on every slice: the relative
    floor and relevance exponent (among the rule's candidates) whose such threshold compresses
    the most, each calibration source's own named point (and ``dev_name``'s, the calibration
    groups and their shifted copies), the per-request threshold (when the slices need thresholds
    far apart), the uncertainty and summary thresholds. ``slices[0]`` is the calibration groups
    (kind ``dev``); ``log``: say which sources are too small for a point of their own."""
    by_label = {s.label: s.scored for s in slices} if len(slices) > 1 else slices[0].scored
    floors = [None, *rule.relative_floors]
    floor, threshold, chosen = calibrate_operating_point(
        by_label,
        rule.aim,
        floors,
        rule.folds,
        [0.0, *rule.relevance_exponents],
        rule.confidence,
        rule.slice_tolerance,
        rule.relevance_contrast,
        rule.choose_by,
    )
    exponent, contrast = chosen["relevance_exponent"], rule.relevance_contrast
    model, defaults = (
        _per_request(slices, rule, (exponent, floor, contrast)) if rule.per_request else (None, {})
    )
    weighted = {s.label: weighted_groups(s.scored, exponent, contrast) for s in slices}
    return Calibration(
        threshold=threshold,
        target_evidence=rule.target_evidence,
        relative_floor=floor,
        relevance_exponent=exponent,
        relevance_contrast=contrast,
        operating_points=_operating_points(slices, dev_name, floors, rule, exponent, log),
        threshold_model=model,
        uncertainty_threshold=_uncertainty_threshold(weighted.values(), rule.uncertain_share),
        summary_threshold=_summary_threshold(weighted.values(), floor, threshold, rule.summary_target),
        complete=True,
        calibrated_for=rule.aim,
        # floors[0] is None and exponents[0] is 0: candidates[0] is the plain token-head score
        absolute_threshold=chosen["candidates"][0]["threshold"],
        slice_thresholds=chosen.get("slice_thresholds", {}),
        candidates=tuple(chosen["candidates"]),
        defaults=defaults,
    )


def _per_request(slices: list[CalibrationSlice], rule: CalibrationRule, score_rule: tuple):
    """The per-request threshold model of every slice under the chosen score rule (None when the
    slices' own thresholds do not call for one) and each slice's default under it."""
    from pruner_model.evaluation.evaluator import with_score_rules
    from pruner_model.evaluation.threshold_fit import FitSlice, fit_threshold_model, group_features

    features = {s.label: group_features(s.groups, s.scored, *score_rule) for s in slices}
    fit = [FitSlice(s.label, with_score_rules(s.scored, *score_rule), features[s.label]) for s in slices]
    model = fit_threshold_model(
        fit,
        rule.aim,
        rule.confidence,
        rule.per_request_bands,
        answer_shares=rule.per_request_answer_shares,
        novelty=rule.per_request_novelty,
        unfamiliar_gate=rule.unfamiliar_gate,
    )
    if model is None:
        return None, {}
    return model, {k: RequestDefault.of(model, x) for k, x in features.items()}


def _operating_points(
    slices: list[CalibrationSlice], dev_name: str, floors, rule: CalibrationRule, exponent, log: bool
):
    """Named ``{threshold, relative_floor}`` pairs under the chosen relevance exponent: each
    calibration source's own (the pair that keeps the aim on that source alone with the most
    cross-validated compression, as the checkpoint's own is chosen) and the dev data's (its groups
    and their shifted copies together). Slices without evidence and sources with fewer than
    ``MIN_POINT_QUERIES`` queries with evidence name none; None with one slice alone."""
    if len(slices) < 2:
        return None
    live = [s for s in slices if s.queries]
    small = [s for s in live if s.kind == "source" and s.queries < MIN_POINT_QUERIES]
    if small and log:
        logger.info(
            "  no named operating point for "
            + ", ".join(f"{s.name} ({s.queries} calibration queries with evidence)" for s in small)
            + f": a point needs {MIN_POINT_QUERIES}"
        )
    too_few = {s.label for s in small}
    named = {s.name: {s.label: s.scored} for s in live if s.kind == "source" and s.label not in too_few}
    own = {s.label: s.scored for s in live if s.kind != "source"}
    if own:
        named["dev" if dev_name in named else dev_name] = own
    points = {}
    for name, part in named.items():
        floor, t, _ = calibrate_operating_point(
            part, rule.aim, floors, rule.folds, [exponent], rule.confidence, contrast=rule.relevance_contrast
        )
        points[name] = {"threshold": t, "relative_floor": floor}
    return points or None


def _summary_threshold(weighted, floor, threshold: float, target: float | None) -> float | None:
    """The lower edge of tiered compression's middle tier: the threshold that keeps ``target``
    (e.g. 0.99) of the evidence on every slice under the chosen rule (``weighted``: each slice's
    relevance-weighted groups); never above the threshold itself."""
    if target is None:
        return None
    return min(threshold, slices_threshold([relative_groups(gs, floor) for gs in weighted], target))


def _uncertainty_threshold(weighted, share: float) -> float | None:
    """The best-sentence score under which ``share`` of the queries with evidence fall, over
    every slice's relevance-weighted groups."""
    best = [float(g.scores.max()) for gs in weighted for g in gs if g.has_evidence and len(g.scores)]
    if not share or not best:
        return None
    return float(np.quantile(best, share))


def write_operating_point(model_dir: Path, name: str, value: float) -> None:
    """The recommended threshold (on the checkpoint's relative floor, as the report measured it)
    into the folder's config.json as the named operating point ``name`` (replacing one of that
    name); the checkpoint's own threshold is left as it is."""
    from pruner_model.core.configuration import PrunerConfig

    floor = PrunerConfig.from_pretrained(str(model_dir)).relative_floor
    Calibration(operating_points={name: {"threshold": value, "relative_floor": floor}}).save(model_dir)
    print(
        f"wrote operating point {name!r} = {value:.4f} into {model_dir / 'config.json'} "
        f"(prune(..., operating_point={name!r}))",
        file=sys.stderr,
    )


def write_threshold(model_dir: Path, pruner, value: float, target: float) -> None:
    """The recommended threshold into the folder's config.json, with the target it keeps; the
    threshold was measured on this backend's scores, so int8 scores get the int8 threshold. A
    full-precision one replaces the per-request threshold: one calibrated on the user's own text
    is the new default."""
    from pruner_model.core.configuration import PrunerConfig

    key = "int8_threshold" if pruner.precision == "int8" else "threshold"
    replaced = key == "threshold" and PrunerConfig.from_pretrained(str(model_dir)).threshold_model is not None
    # target_evidence is the promise of the fp32 threshold: an int8 threshold leaves it as it is
    Calibration(**{key: value}, target_evidence=target if key == "threshold" else None).save(model_dir)
    if replaced:
        print(
            "the per-request threshold (threshold_model) is replaced by this one threshold", file=sys.stderr
        )
    print(
        f"wrote {key} {value:.4f} (evidence target {target}) into {model_dir / 'config.json'}",
        file=sys.stderr,
    )
