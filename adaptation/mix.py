"""The ``mix`` step of an adaptation: the published weights become a blend of the fine-tuned
ones and the checkpoint's (:mod:`pruner_model.training.interpolation`), the share chosen on the
user's calibration split and on general text the report does not use, so that what the
adaptation forgets of general text stays within ``--forget-allowance``."""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict
from pathlib import Path

from pruner_model.adaptation.progress import say
from pruner_model.adaptation.report import general_records, points
from pruner_model.evaluation.groups import group_of
from pruner_model.training.adapt import _base_train_config, sample_of

TRAINED = "model.trained"  # the fine-tuned weights as trained, kept beside a blend


def general_selection(settings) -> tuple[str, list[dict]] | None:
    """General text to measure forgetting on: ``--general-dev``'s groups after the ones the report
    measures (``general_groups`` of them), else the same groups of the checkpoint recipe's dev file
    (its ``train_config.yaml``) where it is on this machine: ``(file, records)``; None without
    either file."""
    path = settings.general_dev
    if path is None:
        dev = (_base_train_config(settings.model).get("data") or {}).get("dev") or []
        path = next((f for f in dev if Path(f).is_file()), None)
    if path is None:
        return None
    return path, general_records(path, settings.general_groups, skip=settings.general_groups)


def mix_step(ctx) -> dict:
    """Measure the shares :func:`search_shares` visits, choose one, write the blend to
    ``out/model`` (the fine-tuned weights moved to ``out/model.trained``), and return what was
    measured."""
    from pruner_model.core.modeling import PrunerModel
    from pruner_model.core.records import read_jsonl
    from pruner_model.training.interpolation import Measured, choose_share, interpolated, search_shares

    settings, out = ctx.settings, ctx.out
    if settings.forget_allowance is None:
        return {"share": 1.0, "reason": "--forget-allowance none: the fine-tuned weights as trained"}
    general = general_selection(settings)
    if general is None or not general[1]:
        why = (
            "no general text (--general-dev) to measure what it forgets"
            if general is None
            else f"{general[0]} has no groups after the {settings.general_groups} the report measures"
        )
        say("mix", f"{why}: the fine-tuned weights as trained")
        return {"share": 1.0, "reason": why}
    general_file, general_recs = general
    tuned_dir = out / TRAINED if (out / TRAINED).is_dir() else out / "model"  # a blend half-written before
    yours = sample_of(read_jsonl(out / "data" / "calibration.jsonl"), settings.sample_groups, settings.seed)
    pruner = ctx.runtime.load(tuned_dir)
    model = pruner.backend.model
    tuned = {k: v.detach().clone() for k, v in model.state_dict().items()}
    start = PrunerModel.from_pretrained(settings.model).state_dict()

    def measure(share: float) -> Measured:
        model.load_state_dict(interpolated(start, tuned, share))
        say("mix", f"share {share:g} of the fine-tuned weights: your calibration split, then general text")
        # share 0 is the checkpoint as it was: the report reuses its scores of your sample
        memo = ctx.checkpoint_scores if share == 0.0 else None
        mine = points(pruner, yours, {}, settings.target, memo=memo)
        return Measured(share, mine["swept"], points(pruner, general_recs, {}, mine["target"])["swept"])

    rows = search_shares(measure, settings.forget_allowance)
    share, reason = choose_share(rows, settings.forget_allowance)
    if share != 1.0 or tuned_dir != out / "model":
        model.load_state_dict(interpolated(start, tuned, share))
        _publish(model, tuned_dir, out)
    say("mix", f"share {share:g} of the fine-tuned weights: {reason}")
    return {
        "share": share,
        "reason": reason,
        "allowance": settings.forget_allowance,
        "general": {"file": general_file, "groups": len({group_of(r) for r in general_recs})},
        "rows": [asdict(r) for r in rows],
    }


def _publish(model, tuned_dir: Path, out: Path) -> None:
    """``model`` (holding the chosen weights) into ``out/model`` whole: written beside it with
    ``tuned_dir``'s tokenizer files, then swapped in, the fine-tuned weights kept at
    ``out/model.trained``."""
    staging = out / "model.mixing"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(tuned_dir, staging)
    model.save_pretrained(str(staging))
    if tuned_dir == out / "model":
        os.replace(out / "model", out / TRAINED)
    else:
        shutil.rmtree(out / "model", ignore_errors=True)
    os.replace(staging, out / "model")
