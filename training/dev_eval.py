"""Dev evaluation during training: metrics at the current step, the history, and ``best/``
saved when ``train.best_metric`` improves."""

from __future__ import annotations

import logging
import math

from pruner_model.evaluation.evaluator import dev_metrics
from pruner_model.evaluation.scorer import score_groups
from pruner_model.training.checkpoints import save_checkpoint

logger = logging.getLogger(__name__)


def evaluate_step(
    model, tokenizer, dev, precision, cfg, state: dict, best_dir, averaged: bool, log: bool
) -> dict:
    """Score the dev groups ``dev`` with ``model`` (unwrapped; ``averaged``: the weight average is
    swapped in), append the metrics to ``state["history"]`` and save ``best_dir`` on a better
    (finite) ``best_metric``."""
    t, mc = cfg.train, model.config
    scored = score_groups(model, dev, tokenizer, precision)
    m = dev_metrics(scored.groups, scored.token_auc, mc.threshold, cfg.calibration.target_evidence)
    m["step"] = state["step"]
    # a resumed finished run evaluates its last step again: replace, do not repeat, that entry
    state["history"] = [h for h in state["history"] if h.get("step") != state["step"]] + [m]
    value = m.get(t.best_metric, float("nan"))
    better = math.isfinite(value) and (state["best"] is None or value > state["best"])
    if better:
        state["best"], state["best_step"] = value, state["step"]
        save_checkpoint(model, tokenizer, best_dir)
    if log:
        which = " (weight average)" if averaged else ""
        logger.info(
            f"step {state['step']}{which}: dev token AUC {scored.token_auc:.4f}, {t.best_metric} {value:.4f}, "
            f"evidence {m['evidence_preserved']:.3f} / compression {m['compression']:.3f} at "
            f"threshold {mc.threshold:.2f}" + (" (best)" if better else "")
        )
    return m
