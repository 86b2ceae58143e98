"""The evaluation engine: a pruner and labeled records in, a typed :class:`Evaluation` out.

Every system gives each unit of each passage a score (the model through :func:`score_groups`,
the baselines through :mod:`pruner_model.evaluation.baselines`); a threshold sweep over those
scores traces each curve of compression vs evidence preserved, through the same metric code. The
model's operating point (the recommended threshold) is then measured through the real pipeline
(dedup and budgets included). The same calls serve `pruner evaluate`, the shift protocol and the
training report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from pruner_model.evaluation.baselines import BASELINES
from pruner_model.evaluation.calibration import calibrate_threshold
from pruner_model.evaluation.groups import LabeledGroup, load_groups, load_range
from pruner_model.evaluation.metrics import (
    ScoredGroup,
    best_compression_at,
    metrics_at,
    relative_groups,
    sweep,
    weighted_groups,
)
from pruner_model.evaluation.report import TARGETS
from pruner_model.evaluation.scorer import score_groups, scored_group
from pruner_model.evaluation.statistics import promise_check

CURVE_KEYS = ("threshold", "evidence_preserved", "compression", "word_compression", "f1", "f2")


def dev_metrics(
    groups: list[ScoredGroup],
    auc: float,
    threshold: float,
    target: float,
    relative_floor: float | None = None,
    relevance_exponent: float = 0.0,
    relevance_contrast: float = 0.0,
    default=None,
) -> dict:
    """Metrics at ``threshold`` (on relevance-weighted scores when ``relevance_exponent`` > 0, then
    relative ones when ``relative_floor`` is set), or at the checkpoint's per-request default
    (``default``, a :class:`~pruner_model.evaluation.threshold_fit.RequestDefault`), plus the best
    compression reachable at the evidence ``target`` on these groups (an in-sample figure)."""
    groups = with_score_rules(groups, relevance_exponent, relative_floor, relevance_contrast)
    m = metrics_at(groups, threshold, None if default is None else default.masks(groups))
    if default is not None:
        t = default.thresholds
        m["threshold"] = float(np.median(t)) if len(t) else float("nan")
        m["per_request"] = True
    m["relative_floor"] = relative_floor
    m["relevance_exponent"] = relevance_exponent
    m["relevance_contrast"] = relevance_contrast
    t = calibrate_threshold(groups, target)
    at_target = metrics_at(groups, t)
    m.update(
        token_auc=auc,
        calibrated_threshold=t,
        compression_at_target=at_target["compression"],
        evidence_at_target=at_target["evidence_preserved"],
    )
    return m


def with_score_rules(
    groups: list[ScoredGroup], exponent: float, floor: float | None, contrast: float = 0.0
) -> list[ScoredGroup]:
    """The scores a checkpoint's threshold is compared with: weighted by passage relevance (set
    against the query's best passage with ``contrast``), then relative to each query's best unit
    (:mod:`pruner_model.core.score_rules`)."""
    return relative_groups(weighted_groups(groups, exponent, contrast), floor)


@dataclass(frozen=True)
class Evaluation:
    """What :meth:`Evaluator.evaluate` returns: the JSON-ready ``report`` (`report.json`) and each
    system's scored groups on the scale its curve is measured on (the same queries in the same
    order for every system, e.g. for :func:`pruner_model.evaluation.statistics.paired_bootstrap`)."""

    report: dict
    systems: dict[str, list[ScoredGroup]] = field(repr=False)


@dataclass
class Evaluator:
    """Measure a pruner on labeled records.

    Groups ``start:start + max_groups`` of the seeded permutation (:func:`load_range`, the
    slicing training calibrates and reports on); all groups when ``max_groups`` is None and
    ``start`` is 0. ``pipeline=False`` reads the operating point off the sentence scores alone,
    without the second pass through the full pipeline (dedup, budgets). ``thresholds`` (name ->
    threshold on the checkpoint's scale): what each keeps, in ``operating_point.at_thresholds``.
    ``confidence``: the recommended threshold keeps ``>= target`` on new queries with that
    confidence (:func:`pruner_model.evaluation.statistics.required_kept`), not only on these.
    """

    records: list[dict]
    target: float = 0.97
    max_groups: int | None = None
    start: int = 0
    seed: int = 0
    baselines: tuple[str, ...] = tuple(BASELINES)
    budgets: tuple[int, ...] = ()
    confidence: float | None = None
    thresholds: dict[str, float] | None = None
    pipeline: bool = True
    progress_factory: object = None  # (total, description) -> a tqdm-like bar

    def evaluate(self, pruner) -> Evaluation:
        unknown = sorted(set(self.baselines) - set(BASELINES))
        if unknown:
            raise ValueError(f"unknown baseline {unknown[0]!r} (choose from {', '.join(BASELINES)})")
        groups = self._groups(pruner.config)
        t0 = time.perf_counter()
        raw, seconds, default = self._score_model(pruner, groups)
        systems = self._systems(pruner.config, groups, raw)
        report = self._header(pruner.config, groups)
        report["systems"] = {name: _curve_summary(gs) for name, gs in systems.items()}
        threshold = calibrate_threshold(systems["pruner"], self.target, self.confidence)
        masks, pipeline_seconds = self._pipeline(pruner, groups, threshold)
        op = self._operating_point(pruner.config, raw, systems["pruner"], threshold, masks, default)
        op["latency_ms_mean"] = 1000 * (pipeline_seconds if masks else seconds) / max(1, len(groups))
        op["seconds"] = time.perf_counter() - t0
        report["recommended_threshold"] = threshold
        report["operating_point"] = op
        if self.budgets:
            report["budgets"] = [
                _budget_row(b, systems["pruner"], keep) for b, keep in zip(self.budgets, masks[1:])
            ]
        return Evaluation(report, systems)

    # ------------------------------------------------------------------ steps
    def _groups(self, cfg) -> list[LabeledGroup]:
        lang, structure = cfg.segmenter_language, cfg.segmenter_structure
        if self.start or self.max_groups is not None:
            stop = None if self.max_groups is None else self.start + self.max_groups
            groups = load_range(self.records, self.seed, self.start, stop, lang, structure)
        else:
            groups = load_groups(self.records, lang, structure)
        if not groups:
            raise ValueError("no groups to evaluate")
        return groups

    def _bar(self, total: int, desc: str):
        return self.progress_factory(total, desc) if self.progress_factory else None

    def _score_model(self, pruner, groups: list[LabeledGroup]) -> tuple[list[ScoredGroup], float, object]:
        """The model's unit scores under its own score rules (relevance weighting), the seconds
        they took, and the checkpoint's per-request default on them (None: one threshold)."""
        from pruner_model.evaluation.threshold_fit import request_default

        scored = score_groups(pruner, groups, progress=self.progress_factory is not None)
        exponent = getattr(pruner.config, "relevance_exponent", 0.0)
        contrast = getattr(pruner.config, "relevance_contrast", 0.0)
        default = request_default(pruner.config, groups, scored.groups)
        return weighted_groups(scored.groups, exponent, contrast), scored.seconds, default

    def _systems(self, cfg, groups, raw: list[ScoredGroup]) -> dict[str, list[ScoredGroup]]:
        floor = getattr(cfg, "relative_floor", None)
        # the curve the checkpoint's thresholds live on: relative scores when it has a relative floor
        systems: dict[str, list[ScoredGroup]] = {"pruner": relative_groups(raw, floor)}
        if floor is not None:
            systems["pruner_absolute"] = raw
        for name in self.baselines:
            system, fn = BASELINES[name]
            bar = self._bar(len(groups), f"scoring ({system})")
            scores = fn(groups, progress=bar)
            if bar is not None:
                bar.close()
            systems[system] = [scored_group(g, sc, r.tokens) for g, sc, r in zip(groups, scores, raw)]
        return systems

    def _header(self, cfg, groups: list[LabeledGroup]) -> dict:
        return {
            "groups": len(groups),
            "passages": sum(len(g.passages) for g in groups),
            "groups_with_evidence": sum(any(lab.any() for lab in g.labels) for g in groups),
            "target_evidence": self.target,
            "confidence": self.confidence,
            "relative_floor": getattr(cfg, "relative_floor", None),
            "relevance_exponent": getattr(cfg, "relevance_exponent", 0.0),
            "relevance_contrast": getattr(cfg, "relevance_contrast", 0.0),
        }

    def _pipeline(self, pruner, groups, threshold: float) -> tuple[list[list[np.ndarray]], float]:
        """Keep masks of the recommended threshold and of each token budget, through the real
        pipeline (dedup included; every setting of a query in one run, so the encoder sees it
        once); ``([], 0)`` without the pipeline pass."""
        if not self.pipeline:
            return [], 0.0
        settings = [pruner.selection_params(threshold=threshold)]
        settings += [pruner.selection_params(threshold=0.0, token_budget=b) for b in self.budgets]
        t0 = time.perf_counter()
        masks = pruner.keep_masks([(g.query, g.passages) for g in groups], settings)
        return masks, time.perf_counter() - t0

    def _operating_point(self, cfg, raw, model_groups, threshold: float, masks, default=None) -> dict:
        """The recommended threshold's numbers, and the checkpoint's default on the same groups:
        its per-request thresholds when it has them (``default``: what ``prune()`` applies with no
        settings; ``checkpoint_threshold`` is then their median and ``at_one_threshold`` the one
        threshold that holds on every calibration slice), else its one threshold."""
        op = metrics_at(model_groups, threshold, keep_masks=masks[0] if masks else None)
        op["checkpoint_threshold"] = float(cfg.threshold)
        if default is None:
            op["at_checkpoint_threshold"] = at = metrics_at(model_groups, float(cfg.threshold))
        else:
            op["checkpoint_default"] = "per-request"
            op["checkpoint_threshold"] = float(np.median(default.thresholds))  # groups are never empty here
            op["at_one_threshold"] = metrics_at(model_groups, float(cfg.threshold))
            at = metrics_at(model_groups, float("nan"), keep_masks=default.masks(model_groups))
            op["at_checkpoint_threshold"] = at = {**at, "threshold": op["checkpoint_threshold"]}
        if at["queries_with_evidence"]:  # the checkpoint's threshold was not fitted on these
            promised = float(cfg.target_evidence or self.target)
            at["promise"] = promise_check(at["queries_preserved"], at["queries_with_evidence"], promised)
        op["at_thresholds"] = {
            name: metrics_at(model_groups, float(t)) for name, t in (self.thresholds or {}).items()
        }
        below = getattr(cfg, "uncertainty_threshold", None)
        if below is not None:  # queries flagged uncertain; the checkpoint's threshold with keep_all for them
            flagged = [bool(len(g.scores)) and float(g.scores.max()) < below for g in raw]
            masks_all = [
                np.ones(len(g.scores), bool) if f else g.scores >= cfg.threshold
                for g, f in zip(model_groups, flagged)
            ]
            fallback = metrics_at(model_groups, float(cfg.threshold), keep_masks=masks_all)
            op["uncertain"] = {
                "threshold": below,
                "share_flagged": float(np.mean(flagged)) if flagged else 0.0,
                "evidence_with_keep_all": fallback["evidence_preserved"],
                "compression_with_keep_all": fallback["compression"],
            }
        return op


def evaluate(pruner, records: list[dict], **settings) -> dict:
    """``Evaluator(records, **settings).evaluate(pruner).report``: the JSON-ready report."""
    return Evaluator(records, **settings).evaluate(pruner).report


def _curve_summary(groups: list[ScoredGroup]) -> dict:
    curve = sweep(groups)
    best = {}
    for t in TARGETS:
        p = best_compression_at(curve, t)
        best[f"{t:.2f}"] = (
            None if p is None else {"compression": p["compression"], "threshold": p["threshold"]}
        )
    return {
        "curve": [{k: pt[k] for k in CURVE_KEYS} for pt in curve],
        "best_compression_at": best,
        "best_f1": max((pt["f1"] for pt in curve), default=0.0),
    }


def _budget_row(budget: int, groups: list[ScoredGroup], keep: list[np.ndarray]) -> dict:
    m = metrics_at(groups, 0.0, keep_masks=keep)
    return {
        "token_budget": budget,
        "evidence_preserved": m["evidence_preserved"],
        "compression": m["compression"],
    }
