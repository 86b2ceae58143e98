"""After training: calibrate the checkpoint's operating point on one slice of dev groups, report
on another, disjoint one.

The slices come from :func:`pruner_model.evaluation.groups.load_range` (a seeded permutation of the dev
group ids): calibration takes groups ``0:calibration_dev_groups``, the report groups from
``report_dev_start`` (default: right after them), so a reported number is never measured on the
groups it was calibrated on.
"""

from __future__ import annotations

import logging

import numpy as np
from pruner_model.core.precision import Precision, resolve_precision
from pruner_model.evaluation.calibrate import Calibration, CalibrationRule, CalibrationSlice
from pruner_model.evaluation.calibrate import calibrate as calibrate_slices
from pruner_model.evaluation.evaluator import dev_metrics
from pruner_model.evaluation.groups import LabeledGroup, group_of, load_groups, load_range, range_ids
from pruner_model.evaluation.scorer import score_groups
from pruner_model.evaluation.statistics import promise_check
from pruner_model.evaluation.threshold_fit import request_default
from pruner_model.training.config import TrainConfig

logger = logging.getLogger(__name__)


PROGRESS_ABOVE = 200  # groups: scoring more shows a progress bar


def calibration_precision(model, cfg: TrainConfig) -> Precision:
    """The precision the calibration and report groups are scored in (``calibration.bf16``:
    auto = bf16 where it is native on the model's device, else fp32)."""
    requested = {"yes": "bf16", "no": "fp32"}.get(cfg.calibration.bf16, cfg.calibration.bf16)
    return resolve_precision(requested, next(model.parameters()).device, purpose="training")


def _score(model, tokenizer, groups: list[LabeledGroup], precision: Precision = "fp32"):
    """Scores of ``groups``, with a progress bar on stderr when there are more than a few hundred."""
    scored = score_groups(model, groups, tokenizer, precision, progress=len(groups) > PROGRESS_ABOVE)
    return scored.groups, scored.token_auc


def _range_groups(
    model, dev: list[dict], seed: int, start: int, stop: int | None, every_answer: bool = False
) -> list[LabeledGroup]:
    """Groups ``start:stop`` of the permutation; with ``every_answer``, each labeled with every
    annotator's answer sentences (``meta.answers``) instead of its record's spans."""
    mc = model.config
    if not every_answer:
        return load_range(dev, seed, start, stop, mc.segmenter_language, mc.segmenter_structure)
    from pruner_model.evaluation.shifts import build_shift

    keep = range_ids((group_of(r) for r in dev), seed, start, stop)
    return load_groups(build_shift("as_is", dev, seed, keep), mc.segmenter_language, mc.segmenter_structure)


def calibrate(model, tokenizer, cfg: TrainConfig, dev: list[dict], quiet: bool = False) -> dict | None:
    """Calibrate the checkpoint's operating point (:func:`pruner_model.evaluation.calibrate.calibrate`)
    on the calibration slice of the labeled dev records ``dev``, its shifted copies and the
    calibration sources, and write it into ``model.config``.

    Returns:
        The calibration metrics (with every candidate's in-sample and cross-validated numbers,
        and ``absolute_threshold``, the plain token-head threshold), or None when calibration is
        off or the slice is empty (the checkpoint's threshold then stands).
    """
    c = cfg.calibration
    if not c.enabled or cfg.data.calibration_dev_groups == 0:
        return None
    groups = _range_groups(model, dev, cfg.data.seed, 0, cfg.data.calibration_dev_groups, c.every_answer)
    if not groups:
        return None
    precision = calibration_precision(model, cfg)
    scored, auc = _score(model, tokenizer, groups, precision)
    slices = [CalibrationSlice("as_is", "dev", groups, scored)]
    slices += _score_shifts(model, tokenizer, cfg, dev, groups, scored, precision)
    slices += _score_sources(model, tokenizer, cfg, precision, quiet)
    result = calibrate_slices(slices, CalibrationRule.of(c), _dev_name(dev), log=not quiet)
    result.write(model.config)
    metrics = _calibration_metrics(result, slices, auc, c, precision)
    if not quiet:
        _log_calibration(result, c, len(groups), precision, metrics)
    return metrics


def _calibration_metrics(
    result: Calibration, slices: list[CalibrationSlice], auc: float, c, precision
) -> dict:
    """metrics.json's ``calibration`` section: the calibration groups at the new default, what was
    compared, and each other slice's evidence kept and compression at the default."""
    exponent, floor, contrast = result.score_rule
    rule = (result.threshold, c.target_evidence, floor, exponent, contrast)
    metrics = dev_metrics(slices[0].scored, auc, *rule, result.defaults.get("as_is"))
    metrics.update(
        uncertainty_threshold=result.uncertainty_threshold,
        absolute_threshold=result.absolute_threshold,
        calibrated_for=result.calibrated_for,
        confidence=c.confidence,
        scored_in=precision,
        candidates=list(result.candidates),
    )
    if result.slice_thresholds:
        metrics["slice_thresholds"] = result.slice_thresholds
        for s in slices[1:]:
            m = dev_metrics(s.scored, float("nan"), *rule, result.defaults.get(s.label))
            metrics[f"shift_{s.label}"] = {k: m[k] for k in ("evidence_preserved", "compression", "f1")}
    if result.operating_points:
        metrics["operating_points"] = dict(result.operating_points)
    return metrics


def _log_calibration(result: Calibration, c, n_groups: int, precision: Precision, metrics: dict) -> None:
    """The calibration's log lines: every candidate (when there was a choice), the per-slice and
    named thresholds, the one threshold and the per-request default."""
    several = (1 + len(c.relative_floors)) * (1 + len(c.relevance_exponents)) > 1
    _log_candidates(list(result.candidates), c.folds, bool(c.relevance_exponents), several)
    mode = "absolute scores" if result.relative_floor is None else f"relative floor {result.relative_floor}"
    if result.relevance_exponent:
        mode += f", x relevance^{result.relevance_exponent}"
        if result.relevance_contrast:
            mode += f" (contrast {result.relevance_contrast})"
    margin = f" + margin {c.margin}" if result.calibrated_for != c.target_evidence else ""
    if c.confidence is not None:
        margin += f", with confidence {c.confidence} per slice"
    if result.slice_thresholds:
        thresholds = ", ".join(f"{k} {v:.4f}" for k, v in result.slice_thresholds.items())
        logger.info("  per-slice thresholds: " + thresholds)
    if result.operating_points:
        logger.info(
            "  named operating points (prune(..., operating_point=NAME)): "
            + ", ".join(f"{k} {_point_text(v)}" for k, v in result.operating_points.items())
        )
    logger.info(
        f"calibrated threshold {result.threshold:.4f} ({mode}) on {n_groups} dev groups "
        f"(evidence target {c.target_evidence}{margin}; scored in {precision})"
    )
    if result.threshold_model is not None:
        logger.info(
            "per-request threshold (the default; "
            + ", ".join(f"{t:.4f}" for t in result.threshold_model.thresholds)
            + " by band"
            + (
                ""
                if result.threshold_model.unlikely_thresholds is None
                else "; requests unlikely to hold an answer "
                + ", ".join(f"{t:.4f}" for t in result.threshold_model.unlikely_thresholds)
            )
            + f", relevance gate {result.threshold_model.min_relevance}"
            + (
                ""
                if result.threshold_model.novelty_min_relevance is None
                else f", {result.threshold_model.novelty_min_relevance} for unfamiliar requests"
            )
            + "): "
            f"as_is kept {metrics['evidence_preserved']:.3f} compression {metrics['compression']:.3f}, "
            + ", ".join(
                f"{k.removeprefix('source:')} {v['evidence_preserved']:.3f} / {v['compression']:.3f}"
                for k, v in ((k[6:], v) for k, v in metrics.items() if k.startswith("shift_"))
            )
        )


def _point_text(point: dict) -> str:
    floor = point["relative_floor"]
    return f"{point['threshold']:.4f} ({'absolute' if floor is None else f'floor {floor}'})"


def _dev_name(dev: list[dict]) -> str:
    """The name of the dev data's operating point: its records' one source, else ``dev``."""
    from pruner_model.evaluation.groups import source_of

    names = {source_of(r) for r in dev}
    return names.pop() if len(names) == 1 else "dev"


def _score_shifts(
    model, tokenizer, cfg: TrainConfig, dev: list[dict], groups, scored, precision: Precision = "fp32"
) -> dict:
    """The calibration groups rebuilt as each ``calibration.shifts`` slice, scored:
    ``{name: (labeled groups, scored groups)}``.

    ``mined``, ``noisy`` and combined copies (``mined+noisy``) are built from the first
    ``calibration.shift_groups`` groups and scored again; slices that keep only low-overlap
    questions (``low_overlap+noisy``, or ``low_overlap`` without every answer labeled) are built
    from all of them, as they score only a quarter or so of the groups. With every answer labeled
    (the slice's labels) ``low_overlap`` is a subset of the calibration groups themselves and
    takes their scores as they are.
    """
    from pruner_model.evaluation.shifts import build_shift, shares_few_words, shift_parts

    c, mc, out = cfg.calibration, model.config, []
    first = {g.id for g in groups[: c.shift_groups]}
    every = {g.id for g in groups}
    for name in c.shifts:
        ids = every if "low_overlap" in shift_parts(name) else first
        if name == "low_overlap" and c.every_answer:
            few = [
                (g, s)
                for g, s in zip(groups, scored)
                if shares_few_words(
                    g.query, (p["text"][a:b] for p in g.passages for a, b in p["relevant_spans"])
                )
            ]
            out.append(CalibrationSlice(name, "shift", [g for g, _ in few], [s for _, s in few]))
            continue
        records = build_shift(name, dev, cfg.data.seed, ids)
        copies = load_groups(records, mc.segmenter_language, mc.segmenter_structure)
        if copies:
            out.append(
                CalibrationSlice(name, "shift", copies, _score(model, tokenizer, copies, precision)[0])
            )
    return out


def source_groups(cfg: TrainConfig, start: int, stop: int | None, config) -> dict[str, list[LabeledGroup]]:
    """``{source: groups}``: groups ``start:stop`` of each source's seeded permutation in
    ``data.calibration_sources``, segmented as ``config`` (the model's) says (sources without a
    labeled sentence, e.g. passage-level only, have no evidence to calibrate on and are left out)."""
    from pruner_model.evaluation.groups import records_by_source
    from pruner_model.training.data import read_records

    d = cfg.data
    if not d.calibration_sources:
        return {}
    records, _ = read_records(d.calibration_sources, None, d.dedup, d.seed)
    by_source = records_by_source(records)
    out = {}
    for src in sorted(by_source):
        gs = load_range(
            by_source[src], d.seed, start, stop, config.segmenter_language, config.segmenter_structure
        )
        if any(g.has_evidence for g in gs):
            out[src] = gs
    return out


def _score_sources(
    model, tokenizer, cfg: TrainConfig, precision: Precision, quiet: bool
) -> list[CalibrationSlice]:
    """Each calibration source's groups, scored: slices of their own beside the shifts."""
    by_source = source_groups(cfg, 0, cfg.data.calibration_source_groups, model.config)
    if by_source and not quiet:
        logger.info("calibration sources: " + ", ".join(f"{k} {len(v)} groups" for k, v in by_source.items()))
    return [
        CalibrationSlice(name, "source", gs, _score(model, tokenizer, gs, precision)[0])
        for name, gs in by_source.items()
    ]


def _log_candidates(candidates: list[dict], folds: int, with_exponent: bool, several: bool) -> None:
    if not several:
        return
    for row in candidates:
        cv = (
            f", {folds}-fold held-out evidence {row['cv_evidence_preserved']:.3f} "
            f"/ compression {row['cv_compression']:.3f}"
            if "cv_compression" in row
            else ""
        )
        exp = f"relevance^{row['relevance_exponent']} " if with_exponent else ""
        curve = row.get("curve_compression")
        curve = "" if curve is None else f", each slice at its own threshold {curve:.3f}"
        logger.info(
            f"  {exp}floor {row['relative_floor']}: threshold {row['threshold']:.4f}, "
            f"in-sample compression {row['compression']:.3f}{cv}{curve}"
        )


def report(
    model,
    tokenizer,
    cfg: TrainConfig,
    dev: list[dict],
    absolute_threshold: float | None = None,
    quiet: bool = False,
) -> dict:
    """Metrics at the checkpoint's operating point on the report slice (never calibrated on).

    Returns:
        ``{"dev": metrics}`` (plus ``"dev_absolute"``, the same slice at ``absolute_threshold`` on
        plain scores, when the checkpoint uses a relative floor or relevance exponent); ``{}``
        when there is no report slice.
    """
    d, mc = cfg.data, model.config
    n_cal = d.calibration_dev_groups
    if n_cal is None or not d.report_dev_groups:
        return {}
    start = d.report_dev_start if d.report_dev_start is not None else n_cal
    groups = _range_groups(model, dev, d.seed, start, start + d.report_dev_groups)
    if not groups:
        return {}
    target = cfg.calibration.target_evidence
    precision = calibration_precision(model, cfg)
    scored, auc = _score(model, tokenizer, groups, precision)
    final = dev_metrics(
        scored,
        auc,
        mc.threshold,
        target,
        mc.relative_floor,
        mc.relevance_exponent,
        mc.relevance_contrast,
        request_default(mc, groups, scored),
    )
    final["passages_per_group"] = float(np.mean([len(g.passages) for g in groups]))
    final["scored_in"] = precision  # "precision" is the sentence precision metric
    if final["queries_with_evidence"]:  # held-out queries: does the calibrated promise hold on them?
        final["promise"] = promise_check(final["queries_preserved"], final["queries_with_evidence"], target)
    out = {"dev": final}
    if (mc.relative_floor is not None or mc.relevance_exponent) and absolute_threshold is not None:
        out["dev_absolute"] = dev_metrics(scored, auc, absolute_threshold, target)
    if not quiet:
        at = (
            f"at the per-request threshold (median {final['threshold']:.4f})"
            if final.get("per_request")
            else f"at threshold {mc.threshold:.4f}"
        )
        logger.info(
            f"dev ({len(groups)} groups not used for calibration: {start}-{start + len(groups) - 1} of "
            f"the permutation) {at}: evidence preserved "
            f"{final['evidence_preserved']:.3f}, compression {final['compression']:.3f}, "
            f"sentence F1 {final['f1']:.3f}, token AUC {auc:.4f}"
        )
    return out
