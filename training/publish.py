"""After the training loop: calibrate the best checkpoint, report on held-out groups, and publish
it (weights, tokenizer, ``metrics.json``, model card) into the output folder."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from pruner_model.core.memory import trim_heap
from pruner_model.core.records import write_json
from pruner_model.training.calibration import calibrate, calibration_precision, report
from pruner_model.training.config import TrainConfig
from pruner_model.training.model_card import write_model_card

logger = logging.getLogger(__name__)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; nothing from that point on is kept."""


def publish(
    model,
    tokenizer,
    cfg: TrainConfig,
    dev_records,
    out: Path,
    history: dict,
    precision: str,
    machine,
    quiet: bool,
) -> dict:
    """Calibrate ``model`` (``calibration`` section), report on the report groups, write the
    folder; returns the metrics. ``history``: the run's best step and evaluations."""
    metrics: dict = {
        **history,
        "precision": {
            "training": precision,
            "calibration": calibration_precision(model, cfg),
            "machine": machine.to_dict(),
        },
    }
    trim_heap()  # calibration starts from what is live, not from the training's fragmented heap
    cal = calibrate(model, tokenizer, cfg, dev_records, quiet=quiet)
    if cal is not None:
        metrics["calibration"] = cal
    elif not quiet:
        logger.info(
            f"not calibrated (calibration off or no calibration groups): threshold "
            f"{model.config.threshold:.4f} stands and no evidence rate is promised"
        )
    if not math.isfinite(model.config.threshold):
        raise TrainingDiverged(f"the calibrated threshold is {model.config.threshold}: not published")
    absolute = cal["absolute_threshold"] if cal else None
    metrics.update(report(model, tokenizer, cfg, dev_records, absolute, quiet=quiet))
    if cal is None:  # an uncalibrated threshold promises nothing to check
        metrics.get("dev", {}).pop("promise", None)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_json(out / "metrics.json", metrics)
    write_model_card(out, cfg, model.config, metrics)
    return metrics


def publish_best(
    best_dir: Path,
    tokenizer,
    cfg: TrainConfig,
    dev_records,
    out: Path,
    state: dict,
    precision,
    machine,
    quiet: bool,
) -> dict:
    """:func:`publish` the best checkpoint of a run (``state``: the trainer's, with its history)."""
    import torch
    from pruner_model.core.modeling import PrunerModel

    if not best_dir.is_dir():
        raise TrainingDiverged("no finite evaluation was ever reached: nothing to publish")
    model = PrunerModel.from_pretrained(str(best_dir))
    model.to("cuda" if torch.cuda.is_available() else "cpu")
    history = {
        "best_step": state.get("best_step"),
        "best_metric": cfg.train.best_metric,
        "history": state.get("history", []),
    }
    return publish(model, tokenizer, cfg, dev_records, out, history, precision, machine, quiet)
