"""`pruner adapt`: a checkpoint adapted to your own text in one command, resumable step by step:
from labeled records (``--labeled``: split by document, fine-tune with replay, calibrate, report,
:mod:`pruner_model.training.adapt`), or from a folder of documents (``--corpus``: chunks, written
questions, mined groups and LLM labels first, :mod:`pruner_model.commands.adapt_corpus`). Without
``--model``, new heads on the bundled encoder are trained on the user's text alone."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pruner_model.commands.adapt_corpus import (
    CORPUS_STEPS,
    add_corpus_arguments,
    corpus_settings,
    run_corpus_steps,
)
from pruner_model.commands.adapt_mix import mix_step
from pruner_model.commands.adapt_report import report_markdown, report_step
from pruner_model.commands.adapt_report import say as _say
from pruner_model.commands.common import (
    add_overrides_argument,
    add_precision_argument,
    existing_model_dir,
    load_pruner,
)
from pruner_model.training.adapt import CALIBRATE_ON, ENCODER, USER


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner adapt",
        description="Adapt a checkpoint to labeled records of your own text (JSONL, as `pruner annotate` "
        "or `pruner data squad --file` write them): the query groups are split by document into "
        "train / calibration / report, the checkpoint is fine-tuned on the train split with a share of "
        "its own training data replayed, its threshold calibrated on the calibration split, and the "
        "report split measures the checkpoint's default, the checkpoint recalibrated alone, and the "
        "adapted model. Without --model, new heads on the bundled encoder are trained on your train split "
        "alone and calibrated on your calibration split. --corpus instead: documents chunked, questions "
        "written and groups labeled by an "
        "LLM first. Writes OUTPUT/model (the adapted checkpoint), OUTPUT/report.md and OUTPUT/adapt.json; "
        "run it again to resume after an interruption.",
    )
    _add_inputs(p)
    p.add_argument("--output", required=True, help="folder for the splits, the adapted model and the report")
    p.add_argument(
        "--split",
        default="0.6,0.2,0.2",
        help="train,calibration,report shares of the documents (default 0.6,0.2,0.2)",
    )
    p.add_argument(
        "--replay",
        nargs="*",
        default=None,
        help="general training records replayed beside yours (default: the checkpoint's own training "
        "files, where they exist; none given: no replay)",
    )
    p.add_argument(
        "--replay-share", type=float, default=0.3, help="share of the training groups replayed (default 0.3)"
    )
    p.add_argument("--epochs", type=int, default=2, help="passes over the training groups (default 2)")
    p.add_argument(
        "--max-train-groups",
        type=int,
        default=None,
        help="train on N groups of the train split (seeded; default all): the calibration and report "
        "splits stay the same, so runs with several N draw a learning curve",
    )
    p.add_argument(
        "--target-evidence",
        type=float,
        default=None,
        help="share of questions that keep all their evidence (default: the checkpoint's promise)",
    )
    _add_calibration_arguments(p)
    _add_mix_arguments(p)
    p.add_argument("--seed", type=int, default=0)
    add_overrides_argument(
        p, "override a value of the fine-tuning config, e.g. --set train.lr=3e-5 (repeatable)"
    )
    p.add_argument("--backend", choices=["auto", "torch"], default="auto")
    add_precision_argument(p)
    add_corpus_arguments(p)
    return p


def _add_mix_arguments(p: argparse.ArgumentParser) -> None:
    """General text and what the adaptation may forget of it."""
    p.add_argument(
        "--general-dev",
        default=None,
        help="labeled general records (e.g. data/squad/dev.jsonl): compression at the promise there "
        "before and after, i.e. what the adaptation forgot (the report: its first --general-groups groups; "
        "the mix step chooses on the next ones; default for the mix step: the checkpoint recipe's dev file)",
    )
    p.add_argument("--general-groups", type=int, default=400, help="groups of --general-dev (default 400)")
    p.add_argument(
        "--forget-allowance",
        type=_allowance,
        default=0.02,
        help="the most compression at the promise that general text may lose (default 0.02): the published "
        "weights blend the fine-tuned ones with the checkpoint's, the share chosen to stay within it and "
        "gain most on your calibration split; none: the fine-tuned weights as trained",
    )


def _add_calibration_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--calibrate-on",
        choices=CALIBRATE_ON,
        default="both",
        help="both (default): the adapted default keeps the promise on your calibration split and on the "
        "checkpoint's own calibration slices (needs its recipe's data files, e.g. pruner data squad && "
        "pruner data mix; else yours alone; without --model: your split and its shifted copies, with the "
        "quickstart's calibration); yours: on your split alone, one threshold, for text that is all you serve",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=0.8,
        help="of the threshold calibrated on your split alone (default 0.8; with both, the recipe's)",
    )


def _add_inputs(p: argparse.ArgumentParser) -> None:
    """What the adaptation starts from (labeled records or documents, a checkpoint or the bundled
    encoder) and where it may stop."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--labeled", nargs="+", help="labeled records of your text (JSONL)")
    src.add_argument(
        "--corpus",
        default=None,
        help="a folder of .txt/.md/.html documents or a JSONL of {id, title, text}: questions and labels "
        "come from the LLM of --llm-model (options below)",
    )
    p.add_argument(
        "--until",
        choices=[*CORPUS_STEPS, "split", "train", "mix", "calibrate"],
        default=None,
        help="stop after this step (run again without it to go on)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="the checkpoint to start from, e.g. runs/default (default: none: the bundled encoder "
        "with new heads, trained on your train split alone with the default model's recipe and calibrated "
        "on your calibration split; --set model.backbone=DIR for another encoder folder)",
    )


def _allowance(text: str) -> float | None:
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number in [0, 1] or none, got {text!r}") from None


def _settings(args):
    from pruner_model.training.adapt import AdaptSettings

    try:
        shares = tuple(float(x) for x in args.split.split(","))
    except ValueError:
        raise ValueError(f"--split must be three numbers, got {args.split!r}") from None
    if args.corpus is not None and args.model is not None and not Path(args.model).is_dir():
        raise ValueError(
            f"--model {args.model!r} is not a checkpoint folder: --model names the checkpoint to adapt "
            "(e.g. runs/quickstart), --llm-model the LLM that writes questions and labels"
        )
    corpus = corpus_settings(args) if args.corpus is not None else None
    labeled = [str(Path(args.output) / "data" / "labeled.jsonl")] if corpus else list(args.labeled)
    settings = AdaptSettings(
        labeled=labeled,
        corpus=corpus,
        model=None if args.model is None else str(existing_model_dir(args.model)),
        output=args.output,
        shares=shares,
        replay_share=args.replay_share,
        replay=None if args.replay is None else list(args.replay),
        epochs=args.epochs,
        max_train_groups=args.max_train_groups,
        target=args.target_evidence,
        confidence=args.confidence,
        general_dev=args.general_dev,
        general_groups=args.general_groups,
        seed=args.seed,
        overrides=list(args.overrides),
        calibrate_on=args.calibrate_on,
        forget_allowance=args.forget_allowance,
    )
    settings.check()
    return settings


def adapt_main(argv: list[str] | None = None) -> int:
    from pruner_model.evaluation.statistics import check_confidence
    from pruner_model.training.adapt import AdaptState, split_records

    args = _parser().parse_args(argv)
    settings = _settings(args)
    try:
        check_confidence(settings.confidence)
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
    out = Path(settings.output)
    out.mkdir(parents=True, exist_ok=True)
    state = AdaptState.load(out, settings)
    if settings.corpus:
        from pruner_model.annotation.llm import EndpointDown

        try:
            if not run_corpus_steps(settings, state, out, args, args.until, _say):
                return _stopped(args.until)
        except EndpointDown as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 3
    steps = {  # each step's result goes into adapt.json; a step whose result is there is not run again
        "split": lambda: split_records(settings, out),
        "train": lambda: _train(settings, out, state.split["train"]["groups"]),
        "mix": lambda: _mix(settings, out, args, state),
        "calibrate": lambda: _calibrate(settings, out, args),
        "report": lambda: report_step(settings, out, args, state),
    }
    for step, run in steps.items():
        if getattr(state, step) is None:
            setattr(state, step, run())
            state.save(out)
        if step == "split":
            _say(
                "split",
                ", ".join(
                    f"{s} {c['groups']} groups ({c['documents']} documents)" for s, c in state.split.items()
                ),
            )
        if step == args.until:
            return _stopped(step)
    report = report_markdown(state)
    (out / "report.md").write_text(report, encoding="utf-8")
    print(report, file=sys.stderr)
    print(f"adapted checkpoint: {out / 'model'} (report in {out / 'report.md'})", file=sys.stderr)
    return 0


def _stopped(step: str) -> int:
    _say("stopped", f"after {step}, as --until asked: run the same command without --until to go on")
    return 0


def _train(settings, out: Path, train_groups: int) -> dict:
    import yaml

    from pruner_model.training.adapt import training_config
    from pruner_model.training.config import load_config
    from pruner_model.training.trainer import train

    config_path = out / "train_config.yaml"
    config_path.write_text(yaml.safe_dump(training_config(settings, out, train_groups), sort_keys=False))
    cfg = load_config(config_path, settings.overrides)
    run = out / "model"
    resume = (Path(str(run) + ".trainer") / "last").exists()
    what = f"fine-tuning {settings.model}" if settings.model else f"training new heads on {ENCODER}"
    _say("train", f"{what} ({'resumed' if resume else 'config ' + str(config_path)})")
    t0 = time.perf_counter()
    metrics = train(cfg, str(run), resume=resume)
    if metrics.get("interrupted"):
        raise KeyboardInterrupt
    return {"seconds": round(time.perf_counter() - t0, 1), "steps": metrics.get("best_step")}


def _mix(settings, out: Path, args, state) -> dict:
    if state.calibrate is not None:  # calibrated already: blending now would void its threshold
        return {"share": 1.0, "reason": "this adaptation was calibrated without a mix step"}
    if settings.model is None:
        return {"share": 1.0, "reason": f"started from {ENCODER}: no checkpoint to blend with"}
    return mix_step(settings, out, args)


def _calibrate(settings, out: Path, args) -> dict:
    from pruner_model.commands.calibrate import measure
    from pruner_model.commands.evaluate import _write_threshold
    from pruner_model.core.records import read_jsonl

    if settings.calibrate_on == "both":
        done = _calibrate_with_general(settings, out)
        if done is not None:
            return done
        _say(
            "calibrate",
            f"{settings.model} has no calibration recipe here (its train_config.yaml's dev and calibration "
            "files): calibrating on your split alone",
        )
    records = read_jsonl(out / "data" / "calibration.jsonl")
    pruner = load_pruner(out / "model", args, say=False)
    result = measure(pruner, records, settings.target, settings.confidence, None, settings.seed)
    _write_threshold(out / "model", pruner, result["threshold"], result["target"])
    _say("calibrate", f"threshold {result['threshold']:.4f} on {result['groups']} calibration groups")
    return {
        "on": "yours",
        "threshold": result["threshold"],
        "target": result["target"],
        "groups": result["groups"],
    }


def _calibrate_with_general(settings, out: Path) -> dict | None:
    """The checkpoint's own calibration (training's, every slice of its recipe) run on the adapted
    model with your calibration split as one more source; None without a recipe to run."""
    import yaml
    from transformers import AutoTokenizer

    from pruner_model.core.configuration import save_config
    from pruner_model.core.modeling import PrunerModel
    from pruner_model.training.adapt import general_calibration_config
    from pruner_model.training.calibration import calibrate
    from pruner_model.training.config import load_config
    from pruner_model.training.data import read_records

    recipe = general_calibration_config(settings, out)
    if recipe is None:
        return None
    path = out / "calibrate_config.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False), encoding="utf-8")
    cfg = load_config(path, settings.overrides)
    alone = settings.model is None  # no checkpoint, no slices of its own: your split and its shifted copies
    beside = "its shifted copies" if alone else ", ".join(cfg.data.dev + cfg.data.calibration_sources[:-1])
    _say("calibrate", f"on your calibration split beside {beside}")
    model = PrunerModel.from_pretrained(str(out / "model")).eval()
    dev, _ = read_records(cfg.data.dev, None, cfg.data.dedup, cfg.data.seed)
    metrics = calibrate(model, AutoTokenizer.from_pretrained(str(out / "model")), cfg, dev)
    if metrics is None:
        return None
    save_config(model.config, out / "model")
    c = model.config
    _say(
        "calibrate",
        ("a per-request threshold; " if c.threshold_model else "")
        + f"one threshold {c.threshold:.4f} holds on every slice"
        + (f'; your split\'s own point "{USER}"' if USER in (c.operating_points or {}) else ""),
    )
    return {
        "on": "recipe" if alone else "both",
        "threshold": c.threshold,
        "target": c.target_evidence,
        "per_request": c.threshold_model is not None,
        "slice_thresholds": metrics.get("slice_thresholds", {}),
    }
