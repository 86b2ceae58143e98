"""After training: calibrate the checkpoint's operating point on one slice of dev groups, report
on another, disjoint one.

The slices come from :func:`pruner_model.groups.slice_groups` (a seeded permutation of the dev
group ids): calibration takes groups ``0:calibration_dev_groups``, the report groups from
``report_dev_start`` (default: right after them), so a reported number is never measured on the
groups it was calibrated on.
"""

from __future__ import annotations

import sys

import numpy as np
from tqdm.auto import tqdm

from pruner_model.groups import LabeledGroup, slice_groups

from .config import TrainConfig
from .evaluation import build_dev_set, dev_metrics, score_dev
from .metrics import calibrate_operating_point


def log(msg: str) -> None:
    tqdm.write(msg, file=sys.stderr)


def _score(model, tokenizer, groups: list[LabeledGroup]):
    mc = model.config
    dev = build_dev_set(groups, tokenizer, mc.max_length, mc.stride, mc.max_query_length)
    return score_dev(model, dev, pad_id=tokenizer.pad_token_id or 0)


def calibrate(
    model, tokenizer, cfg: TrainConfig, dev: list[LabeledGroup], quiet: bool = False
) -> dict | None:
    """Fit the threshold (and relative floor, relevance exponent) on the calibration slice and
    write them into ``model.config``.

    Returns:
        The calibration metrics (with every candidate's in-sample and cross-validated numbers,
        and ``absolute_threshold``, the plain token-head threshold), or None when calibration is
        off or the slice is empty (the checkpoint's threshold then stands).
    """
    c = cfg.calibration
    groups = slice_groups(dev, cfg.data.seed, 0, cfg.data.calibration_dev_groups)
    if not groups or not c.enabled:
        return None
    mc = model.config
    scored, auc = _score(model, tokenizer, groups)
    aim = min(1.0, c.target_evidence + c.margin)  # what the threshold is calibrated for
    floors = [None, *c.relative_floors]
    exponents = [0.0, *c.relevance_exponents]
    mc.relative_floor, mc.threshold, chosen = calibrate_operating_point(
        scored, aim, floors, c.folds, exponents
    )
    mc.relevance_exponent = chosen["relevance_exponent"]
    metrics = dev_metrics(
        scored, auc, mc.threshold, c.target_evidence, mc.relative_floor, mc.relevance_exponent
    )
    # floors[0] is None and exponents[0] is 0: candidates[0] is the plain token-head score
    metrics.update(
        absolute_threshold=chosen["candidates"][0]["threshold"],
        calibrated_for=aim,
        candidates=chosen["candidates"],
    )
    if not quiet:
        _log_calibration(chosen["candidates"], c.folds, len(exponents) > 1, len(floors) * len(exponents) > 1)
        mode = "absolute scores" if mc.relative_floor is None else f"relative floor {mc.relative_floor}"
        if mc.relevance_exponent:
            mode += f", x relevance^{mc.relevance_exponent}"
        margin = f" + margin {c.margin}" if aim != c.target_evidence else ""
        log(
            f"calibrated threshold {mc.threshold:.4f} ({mode}) on {len(groups)} dev groups "
            f"(evidence target {c.target_evidence}{margin})"
        )
    return metrics


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
        log(
            f"  {exp}floor {row['relative_floor']}: threshold {row['threshold']:.4f}, "
            f"in-sample compression {row['compression']:.3f}{cv}"
        )


def report(
    model,
    tokenizer,
    cfg: TrainConfig,
    dev: list[LabeledGroup],
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
    groups = slice_groups(dev, d.seed, start, start + d.report_dev_groups)
    if not groups:
        return {}
    target = cfg.calibration.target_evidence
    scored, auc = _score(model, tokenizer, groups)
    final = dev_metrics(scored, auc, mc.threshold, target, mc.relative_floor, mc.relevance_exponent)
    final["passages_per_group"] = float(np.mean([len(g.passages) for g in groups]))
    out = {"dev": final}
    if (mc.relative_floor is not None or mc.relevance_exponent) and absolute_threshold is not None:
        out["dev_absolute"] = dev_metrics(scored, auc, absolute_threshold, target)
    if not quiet:
        log(
            f"dev ({len(groups)} groups not used for calibration: {start}-{start + len(groups) - 1} of "
            f"the permutation) at threshold {mc.threshold:.4f}: evidence preserved "
            f"{final['evidence_preserved']:.3f}, compression {final['compression']:.3f}, "
            f"sentence F1 {final['f1']:.3f}, token AUC {auc:.4f}"
        )
    return out
