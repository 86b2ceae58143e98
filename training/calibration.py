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
from pruner_model.evaluation.calibration import calibrate_operating_point, slices_threshold
from pruner_model.evaluation.evaluator import dev_metrics
from pruner_model.evaluation.groups import LabeledGroup, group_of, load_groups, load_range, range_ids
from pruner_model.evaluation.metrics import relative_groups, weighted_groups
from pruner_model.evaluation.scorer import score_groups
from pruner_model.evaluation.statistics import promise_check
from pruner_model.evaluation.threshold_fit import RequestDefault, request_default
from pruner_model.training.config import TrainConfig

logger = logging.getLogger(__name__)


def calibration_precision(model, cfg: TrainConfig) -> Precision:
    """The precision the calibration and report groups are scored in (``calibration.bf16``:
    auto = bf16 where it is native on the model's device, else fp32)."""
    requested = {"yes": "bf16", "no": "fp32"}.get(cfg.calibration.bf16, cfg.calibration.bf16)
    return resolve_precision(requested, next(model.parameters()).device, purpose="training")


def _score(model, tokenizer, groups: list[LabeledGroup], precision: Precision = "fp32"):
    scored = score_groups(model, groups, tokenizer, precision)
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


# over 60 lines: score, choose floor and exponent, set the config, log: one sequence whose intermediate results are all reported
def calibrate(model, tokenizer, cfg: TrainConfig, dev: list[dict], quiet: bool = False) -> dict | None:
    """Fit the threshold (and relative floor, relevance exponent) on the calibration slice of the
    labeled dev records ``dev`` and write them into ``model.config``.

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
    mc = model.config
    mc.relevance_contrast = c.relevance_contrast  # a fixed rule: the floor and exponent are chosen under it
    precision = calibration_precision(model, cfg)
    scored, auc = _score(model, tokenizer, groups, precision)
    labeled = _score_shifts(model, tokenizer, cfg, dev, groups, scored, precision)
    labeled.update(_score_sources(model, tokenizer, cfg, precision, quiet))
    shifted = {k: gs for k, (_, gs) in labeled.items()}
    labeled = {"as_is": (groups, scored), **labeled}
    aim = min(1.0, c.target_evidence + c.margin)  # what the threshold is calibrated for
    floors = [None, *c.relative_floors]
    exponents = [0.0, *c.relevance_exponents]
    pool = scored + [g for gs in shifted.values() for g in gs]
    # with shifted slices: the threshold that meets the target on every slice, and the floor and
    # exponent whose such threshold compresses the most
    slices = {"as_is": scored, **shifted} if shifted else scored
    mc.relative_floor, mc.threshold, chosen = calibrate_operating_point(
        slices,
        aim,
        floors,
        c.folds,
        exponents,
        c.confidence,
        c.slice_tolerance,
        mc.relevance_contrast,
        c.choose_by,
    )
    mc.relevance_exponent = chosen["relevance_exponent"]
    mc.target_evidence = c.target_evidence
    per_slice = chosen.get("slice_thresholds", {})
    mc.operating_points = _operating_points(slices, _dev_name(dev), floors, aim, c, mc, quiet)
    # each slice's request features, computed once: for the fit and for the metrics at its default
    features = _slice_features(labeled, mc) if c.per_request else {}
    per_request = _threshold_model(labeled, features, mc, aim, c) if c.per_request else None
    mc.threshold_model = None if per_request is None else per_request.to_dict()

    def default(name: str) -> RequestDefault | None:
        if per_request is None:
            return None
        return RequestDefault(per_request.thresholds_of(features[name]), per_request.min_relevance)

    mc.uncertainty_threshold = _uncertainty_threshold(pool, mc, c.uncertain_share)
    mc.summary_threshold = _summary_threshold(slices, mc, c.summary_target)
    metrics = dev_metrics(
        scored,
        auc,
        mc.threshold,
        c.target_evidence,
        mc.relative_floor,
        mc.relevance_exponent,
        mc.relevance_contrast,
        default("as_is"),
    )
    # floors[0] is None and exponents[0] is 0: candidates[0] is the plain token-head score
    metrics.update(
        uncertainty_threshold=mc.uncertainty_threshold,
        absolute_threshold=chosen["candidates"][0]["threshold"],
        calibrated_for=aim,
        confidence=c.confidence,
        scored_in=precision,
        candidates=chosen["candidates"],
    )
    if per_slice:
        metrics["slice_thresholds"] = per_slice
        for name, gs in shifted.items():
            m = dev_metrics(
                gs,
                float("nan"),
                mc.threshold,
                c.target_evidence,
                mc.relative_floor,
                mc.relevance_exponent,
                mc.relevance_contrast,
                default(name),
            )
            metrics[f"shift_{name}"] = {k: m[k] for k in ("evidence_preserved", "compression", "f1")}
    if mc.operating_points:
        metrics["operating_points"] = dict(mc.operating_points)
    if not quiet:
        _log_calibration(chosen["candidates"], c.folds, len(exponents) > 1, len(floors) * len(exponents) > 1)
        mode = "absolute scores" if mc.relative_floor is None else f"relative floor {mc.relative_floor}"
        if mc.relevance_exponent:
            mode += f", x relevance^{mc.relevance_exponent}"
            if mc.relevance_contrast:
                mode += f" (contrast {mc.relevance_contrast})"
        margin = f" + margin {c.margin}" if aim != c.target_evidence else ""
        if c.confidence is not None:
            margin += f", with confidence {c.confidence} per slice"
        if per_slice:
            logger.info("  per-slice thresholds: " + ", ".join(f"{k} {v:.4f}" for k, v in per_slice.items()))
        if mc.operating_points:
            logger.info(
                "  named operating points (prune(..., operating_point=NAME)): "
                + ", ".join(f"{k} {_point_text(v)}" for k, v in mc.operating_points.items())
            )
        logger.info(
            f"calibrated threshold {mc.threshold:.4f} ({mode}) on {len(groups)} dev groups "
            f"(evidence target {c.target_evidence}{margin}; scored in {precision})"
        )
        if mc.threshold_model is not None:
            logger.info(
                "per-request threshold (the default; "
                + ", ".join(f"{t:.4f}" for t in mc.threshold_model["thresholds"])
                + f" by band, relevance gate {mc.threshold_model['min_relevance']}): "
                f"as_is kept {metrics['evidence_preserved']:.3f} compression {metrics['compression']:.3f}, "
                + ", ".join(
                    f"{k.removeprefix('source:')} {v['evidence_preserved']:.3f} / {v['compression']:.3f}"
                    for k, v in ((k[6:], v) for k, v in metrics.items() if k.startswith("shift_"))
                )
            )
    return metrics


def _slice_features(labeled: dict, mc) -> dict:
    """``{slice: [groups, len(FEATURES)]}``: every calibration slice's request features under the
    chosen score rule (``mc``, the model's config)."""
    from pruner_model.evaluation.threshold_fit import group_features

    rule = (mc.relevance_exponent, mc.relative_floor, mc.relevance_contrast)
    return {name: group_features(groups, raw, *rule) for name, (groups, raw) in labeled.items()}


def _threshold_model(labeled: dict, features: dict, mc, aim: float, c):
    """The per-request threshold model (:mod:`pruner_model.evaluation.threshold_fit`) of every
    calibration slice under the chosen score rule (``mc``, the model's config); None when the
    slices' own thresholds do not call for one."""
    from pruner_model.evaluation.evaluator import with_score_rules
    from pruner_model.evaluation.threshold_fit import FitSlice, fit_threshold_model

    rule = (mc.relevance_exponent, mc.relative_floor, mc.relevance_contrast)
    slices = [
        FitSlice(name, with_score_rules(raw, *rule), features[name]) for name, (_, raw) in labeled.items()
    ]
    return fit_threshold_model(slices, aim, c.confidence, c.per_request_bands)


def _point_text(point: dict) -> str:
    floor = point["relative_floor"]
    return f"{point['threshold']:.4f} ({'absolute' if floor is None else f'floor {floor}'})"


def _dev_name(dev: list[dict]) -> str:
    """The name of the dev data's operating point: its records' one source, else ``dev``."""
    from pruner_model.evaluation.groups import source_of

    names = {source_of(r) for r in dev}
    return names.pop() if len(names) == 1 else "dev"


# a source's own operating point is fitted on its calibration queries alone: with fewer than this
# many that have evidence, the kept share's 95% interval is wider than about +-0.03 at 0.95 and
# the point would promise what its groups cannot show (docs/bring-your-own-corpus.md)
MIN_POINT_QUERIES = 200


def _queries(groups) -> int:
    return sum(g.has_evidence for g in groups)


def _operating_points(slices, dev_name: str, floors, aim: float, c, mc, quiet: bool = True):
    """Named ``{threshold, relative_floor}`` pairs under the checkpoint's relevance exponent and
    contrast (``mc``, its config): each
    calibration source's own (the pair that keeps ``aim`` on that source alone with the most
    cross-validated compression, as the checkpoint's own is chosen) and the dev data's (its groups
    and their shifted copies together). Slices without evidence (passage labels only) and sources
    with fewer than ``MIN_POINT_QUERIES`` queries with evidence name none; None when ``slices`` is
    one list of groups (no shifted copies, no calibration sources)."""
    if not isinstance(slices, dict):
        return None
    live = [k for k, gs in slices.items() if _queries(gs)]
    small = [k for k in live if k.startswith("source:") and _queries(slices[k]) < MIN_POINT_QUERIES]
    if small and not quiet:
        logger.info(
            "  no named operating point for "
            + ", ".join(f"{k[7:]} ({_queries(slices[k])} calibration queries with evidence)" for k in small)
            + f": a point needs {MIN_POINT_QUERIES}"
        )
    named = {k[7:]: {k: slices[k]} for k in live if k.startswith("source:") and k not in small}
    own = {k: slices[k] for k in live if not k.startswith("source:")}
    if own:
        named["dev" if dev_name in named else dev_name] = own
    points = {}
    for name, part in named.items():
        floor, t, _ = calibrate_operating_point(
            part, aim, floors, c.folds, [mc.relevance_exponent], c.confidence, contrast=mc.relevance_contrast
        )
        points[name] = {"threshold": t, "relative_floor": floor}
    return points or None


def _summary_threshold(slices, mc, target: float | None) -> float | None:
    """The lower edge of tiered compression's middle tier: the threshold that keeps ``target``
    (e.g. 0.99) of the evidence on every calibration slice, under the chosen floor and exponent;
    never above the threshold itself."""
    if target is None:
        return None
    named = slices if isinstance(slices, dict) else {"all": slices}
    rel = [
        relative_groups(weighted_groups(gs, mc.relevance_exponent, mc.relevance_contrast), mc.relative_floor)
        for gs in named.values()
    ]
    return min(mc.threshold, slices_threshold(rel, target))


def _uncertainty_threshold(groups, mc, share: float) -> float | None:
    """The best-sentence score under which ``share`` of the queries with evidence fall (under the
    checkpoint's relevance exponent and contrast, ``mc``)."""
    weighted = weighted_groups(groups, mc.relevance_exponent, mc.relevance_contrast)
    best = [float(g.scores.max()) for g in weighted if g.has_evidence and len(g.scores)]
    if not share or not best:
        return None
    return float(np.quantile(best, share))


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

    c, mc, out = cfg.calibration, model.config, {}
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
            out[name] = ([g for g, _ in few], [s for _, s in few])
            continue
        records = build_shift(name, dev, cfg.data.seed, ids)
        copies = load_groups(records, mc.segmenter_language, mc.segmenter_structure)
        if copies:
            out[name] = (copies, _score(model, tokenizer, copies, precision)[0])
    return out


def source_slices(cfg: TrainConfig, start: int, stop: int | None, config) -> dict:
    """``{"source:<name>": groups}``: groups ``start:stop`` of each source's seeded permutation in
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
            out[f"source:{src}"] = gs
    return out


def _score_sources(model, tokenizer, cfg: TrainConfig, precision: Precision, quiet: bool) -> dict:
    """Each calibration source's groups, scored (slices of their own beside the shifts):
    ``{"source:<name>": (labeled groups, scored groups)}``."""
    slices = source_slices(cfg, 0, cfg.data.calibration_source_groups, model.config)
    if slices and not quiet:
        logger.info(
            "calibration sources: " + ", ".join(f"{k[7:]} {len(v)} groups" for k, v in slices.items())
        )
    return {name: (gs, _score(model, tokenizer, gs, precision)[0]) for name, gs in slices.items()}


def _log_calibration(candidates: list[dict], folds: int, with_exponent: bool, several: bool) -> None:
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
