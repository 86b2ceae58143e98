"""`pruner adapt`: the arguments of an adaptation (:mod:`pruner_model.adaptation`, which runs
it step by step, resumable) and what it prints: from labeled records (``--labeled``) or from a
folder of documents (``--corpus``); without ``--model``, new heads on the bundled encoder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pruner_model.adaptation.pipeline import CORPUS_STEPS, STEPS
from pruner_model.commands.common import (
    add_corpus_arguments,
    add_overrides_argument,
    add_precision_argument,
    endpoint_settings,
    existing_model_dir,
    load_pruner,
    number_or_none,
)
from pruner_model.training.adapt import CALIBRATE_ON


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner adapt",
        description="Adapt a checkpoint to labeled records of your own text (JSONL, as `pruner annotate` or "
        "`pruner data squad --file` write them): the query groups are split by document into train / "
        "calibration / report; the checkpoint is fine-tuned on the train split with a share of its own "
        "training data replayed, blended with its old weights within --forget-allowance, calibrated on the "
        "calibration split, and measured on the report split beside its default and itself recalibrated. "
        "Without --model: new heads on the bundled encoder, trained on your text alone. --corpus: documents "
        "chunked, questions written and groups labeled by an LLM first. Writes OUTPUT/model, "
        "OUTPUT/report.md and OUTPUT/adapt.json; run it again to resume after an interruption.",
    )
    _add_inputs(p)
    p.add_argument("--output", required=True, help="folder for the splits, the adapted model and the report")
    p.add_argument("--split", default="0.6,0.2,0.2", help="train,calibration,report shares of the documents")
    p.add_argument(
        "--replay",
        nargs="*",
        default=None,
        help="general training records replayed beside yours (default: the checkpoint's own training "
        "files, where they exist; none given: no replay)",
    )
    p.add_argument("--replay-share", type=float, default=0.3, help="share of the training groups replayed")
    p.add_argument("--epochs", type=int, default=2, help="passes over the training groups (default 2)")
    p.add_argument(
        "--max-train-groups",
        type=int,
        default=None,
        help="train on N groups of the train split (seeded; default all); the other splits stay the same",
    )
    p.add_argument(
        "--target-evidence", type=float, default=None, help="share of questions that keep all their evidence"
    )
    p.add_argument(
        "--calibrate-on",
        choices=CALIBRATE_ON,
        default="both",
        help="both (default): the default keeps the promise on your calibration split and on the "
        "checkpoint's own calibration slices where its recipe's files are here (else yours alone); yours: "
        "one threshold on your split alone, for text that is all you serve",
    )
    p.add_argument(
        "--confidence", type=float, default=0.8, help="of a threshold calibrated on your split alone"
    )
    p.add_argument(
        "--sample-groups",
        type=int,
        default=1000,
        help="query groups of each split that calibration, the mix step and the report score (a seeded "
        "draw; default 1000; 0: all)",
    )
    _add_mix_arguments(p)
    p.add_argument("--seed", type=int, default=0)
    add_overrides_argument(p, "override a value of the fine-tuning config, e.g. --set train.lr=3e-5")
    p.add_argument("--backend", choices=["auto", "torch"], default="auto")
    add_precision_argument(p)
    add_corpus_arguments(p)
    return p


def _add_mix_arguments(p: argparse.ArgumentParser) -> None:
    """General text and what the adaptation may forget of it."""
    p.add_argument(
        "--general-dev",
        default=None,
        help="labeled general records: compression at the promise there before and after, i.e. what the "
        "adaptation forgot (the report: its first --general-groups groups; the mix step chooses on the next "
        "ones; default for the mix step: the checkpoint recipe's dev file)",
    )
    p.add_argument("--general-groups", type=int, default=400, help="groups of --general-dev (default 400)")
    p.add_argument(
        "--forget-allowance",
        type=number_or_none,
        default=0.02,
        help="the most compression at the promise that general text may lose (default 0.02); none: the "
        "fine-tuned weights as trained",
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
        choices=[*CORPUS_STEPS, *STEPS[:-1]],
        default=None,
        help="stop after this step (run again without it to go on)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="the checkpoint to start from; 'default': the shipped default model (default: the bundled encoder "
        "with new heads, trained with the default model's recipe; --set model.backbone=DIR for another)",
    )


def _settings(args):
    from pruner_model.training.adapt import AdaptSettings

    try:
        shares = tuple(float(x) for x in args.split.split(","))
    except ValueError:
        raise ValueError(f"--split must be three numbers, got {args.split!r}") from None
    if args.corpus is not None and args.model not in (None, "default") and not Path(args.model).is_dir():
        raise ValueError(
            f"--model {args.model!r} is not a checkpoint folder: --model names the checkpoint to adapt "
            "(e.g. runs/mine), --llm-model the LLM that writes questions and labels"
        )
    from pruner_model.adaptation.corpus import corpus_settings

    corpus = corpus_settings(args) if args.corpus is not None else None
    labeled = [str(Path(args.output) / "data" / "labeled.jsonl")] if corpus else list(args.labeled)
    settings = AdaptSettings(
        labeled=labeled,
        corpus=corpus,
        model=None
        if args.model is None
        else str(existing_model_dir(None if args.model == "default" else args.model).resolve()),
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
        sample_groups=args.sample_groups or None,
    )
    settings.check()
    return settings


def adapt_main(argv: list[str] | None = None) -> int:
    from pruner_model.adaptation.pipeline import Runtime, run
    from pruner_model.adaptation.progress import say
    from pruner_model.annotation.llm import EndpointDown
    from pruner_model.evaluation.statistics import check_confidence

    args = _parser().parse_args(argv)
    settings = _settings(args)
    try:
        check_confidence(settings.confidence)
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
    runtime = Runtime(
        # checkpoints are measured in full precision, a cached int8 export of theirs or not
        load=lambda folder: load_pruner(folder, args, say=False, quantized=False),
        llm=lambda model: endpoint_settings(args, model, "--llm-model"),
    )
    try:
        state = run(settings, runtime, args.until)
    except EndpointDown as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    if state is None:
        say("stopped", f"after {args.until}, as --until asked: run the same command without --until to go on")
        return 0
    out = Path(settings.output)
    print((out / "report.md").read_text(encoding="utf-8"), file=sys.stderr)
    print(f"adapted checkpoint: {out / 'model'} (report in {out / 'report.md'})", file=sys.stderr)
    return 0
