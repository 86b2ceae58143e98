"""The steps of an adaptation in order, each a function of one :class:`Context` returning what it
measured, and :func:`run`, the one place that skips a step whose result ``adapt.json`` holds,
runs it otherwise and saves its result:

1. with documents (``settings.corpus``): ``chunks``, ``questions``, ``groups``, ``labels``
   (:mod:`pruner_model.adaptation.corpus`);
2. ``split``: the labeled query groups cut by document (:func:`pruner_model.training.adapt.split_records`);
3. ``train``: fine-tuning with replay, or new heads on the bundled encoder;
4. ``mix``: the published weights blended with the checkpoint's (:mod:`pruner_model.adaptation.mix`);
5. ``calibrate``: the default calibrated on the calibration split, beside the checkpoint's own
   calibration slices where its recipe's files are here;
6. ``report``: the report split measured (:mod:`pruner_model.adaptation.report`), then ``report.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pruner_model.adaptation.progress import say
from pruner_model.evaluation.sources import ScoreMemo
from pruner_model.training.adapt import ENCODER, USER, AdaptSettings, AdaptState, sample_of

CORPUS_STEPS = ("chunks", "questions", "groups", "labels")
STEPS = ("split", "train", "mix", "calibrate", "report")
# the fewest training groups at which fine-tuning the shipped model was measured to pay on a
# never-trained set (docs/bring-your-own-corpus.md: swept at the promise, 100 groups gained 0.074 on
# FriendsQA split by scene, 600 only 0.013 more; 200 gained 0.04 on PolicyQA, 0.01 on COVID-QA);
# below it, adapt says so
SMALL_TRAIN_GROUPS = 100


@dataclass
class Runtime:
    """What the steps need from their caller: ``load`` a checkpoint folder as a
    :class:`~pruner_model.inference.ContextPruner` (backend and precision as the user asked), and
    ``llm``, the LLM endpoint's settings for a model name (asked for only by the corpus steps that
    call it, so a resumed run past them needs no endpoint)."""

    load: Callable[[Path], object]
    llm: Callable[[str | None], object] | None = None


@dataclass
class Context:
    """One adaptation: its settings, output folder, runtime and the state the steps fill in."""

    settings: AdaptSettings
    out: Path
    runtime: Runtime
    state: AdaptState
    rate: float | None = None  # windows of 256 tokens a second this machine scores (a probe)
    # the checkpoint's own scores of the calibration sample: the mix step's share 0 computes
    # them, the report reuses them (one pass fewer over the sample)
    checkpoint_scores: ScoreMemo = field(default_factory=ScoreMemo)

    @property
    def data(self) -> Path:
        return self.out / "data"


def run(settings: AdaptSettings, runtime: Runtime, until: str | None = None) -> AdaptState | None:
    """Every step not yet in ``OUTPUT/adapt.json``, in order, saving each result as it comes;
    ``OUTPUT/report.md`` at the end. Returns the finished state, or None when stopped after
    ``until``. Raises :class:`~pruner_model.annotation.llm.EndpointDown` when the LLM endpoint
    stays down (what was written is kept: the same call resumes)."""
    from pruner_model.adaptation import corpus, report
    from pruner_model.core.memory import trim_heap
    from pruner_model.training.adapt import split_records

    out = Path(settings.output)
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(settings, out, runtime, AdaptState.load(out, settings))
    steps: dict[str, Callable[[Context], dict]] = {
        "split": lambda c: split_records(c.settings, c.out),
        "train": train,
        "mix": mix,
        "calibrate": calibrate,
        "report": report.report_step,
    }
    if settings.corpus:
        steps = {**corpus.STEPS, **steps}
    for step, fn in steps.items():
        if _result(ctx.state, step) is None:
            _announce(ctx, step)
            t0 = time.perf_counter()
            result = fn(ctx)
            if step in CORPUS_STEPS:
                result["seconds"] = round(time.perf_counter() - t0, 1)
            _store(ctx.state, step, result)
            ctx.state.save(out)
            trim_heap()  # the next step starts from what is live, not this one's fragmented heap
        _say_result(ctx.state, step)
        if step == until:
            return None
    text = report.report_markdown(ctx.state)
    (out / "report.md").write_text(text, encoding="utf-8")
    return ctx.state


def _announce(ctx: Context, step: str) -> None:
    """Say how long ``step`` will take before it starts, where that is a minute or more."""
    from pruner_model.adaptation import estimate

    if step not in ("train", "mix", "calibrate", "report"):
        return
    if step == "mix" and (ctx.settings.model is None or ctx.settings.forget_allowance is None):
        return
    if ctx.rate is None:
        from pruner_model.core.default_model import default_model_path

        probe = Path(ctx.settings.model) if ctx.settings.model else default_model_path()  # the same encoder
        ctx.rate = estimate.scoring_rate(ctx.runtime.load(probe))
    line = estimate.text(*_workload(ctx, step), ctx.rate, estimate.TRAIN_COST if step == "train" else 1.0)
    if line:
        say(step, line)


def _workload(ctx: Context, step: str) -> tuple[str, int]:
    """What ``step`` reads: (what, how many) for :func:`pruner_model.adaptation.estimate.text`."""
    from pruner_model.adaptation.estimate import pairs_in

    s, n = ctx.settings, ctx.settings.sample_groups
    cal, report = [ctx.data / "calibration.jsonl"], [ctx.data / "report.jsonl"]
    general = 0 if s.general_dev is None else 5 * s.general_groups
    if step == "train":
        from pruner_model.training.adapt import replay_files

        groups = ctx.state.split["train"]["groups"]
        groups = min(groups, s.max_train_groups or groups)
        replayed = s.replay_share if replay_files(s) else 0.0
        return "training windows", round(
            pairs_in([ctx.data / "train.jsonl"], groups) / (1 - replayed) * s.epochs
        )
    if step == "mix":  # two to four blends, each on your calibration sample and on general text
        return "pairs to score", 4 * (pairs_in(cal, n) + general)
    if step == "calibrate":
        from pruner_model.training.adapt import _sources_of, general_calibration_config

        recipe = general_calibration_config(s, ctx.out) if s.calibrate_on == "both" else None
        if recipe is None:
            return "pairs to score", pairs_in(cal, n)
        d, c = recipe["data"], recipe["calibration"]
        dev = d.get("calibration_dev_groups") or n or 1000
        shifts = len(c.get("shifts") or []) * min(c.get("shift_groups") or 300, dev)
        sources = len(_sources_of(d["calibration_sources"])) * d.get("calibration_source_groups", 200)
        return "pairs to score", 5 * (dev + shifts + sources)  # groups of about 5 passages
    on_report = pairs_in(report, n) + general  # each model: the report sample and general text
    if s.model is None:
        return "pairs to score", on_report
    # the checkpoint recalibrated on your sample: scored already where the mix step ran here
    return "pairs to score", (0 if ctx.checkpoint_scores else pairs_in(cal, n)) + 2 * on_report


def _result(state: AdaptState, step: str) -> dict | None:
    if step in CORPUS_STEPS:
        return (state.corpus or {}).get(step)
    return getattr(state, step)


def _store(state: AdaptState, step: str, result: dict) -> None:
    if step in CORPUS_STEPS:
        state.corpus = {**(state.corpus or {}), step: result}
    else:
        setattr(state, step, result)


def _say_result(state: AdaptState, step: str) -> None:
    """The line a finished (or found finished) step prints."""
    if step in CORPUS_STEPS:
        say(step, ", ".join(f"{k} {v}" for k, v in state.corpus[step].items() if not isinstance(v, dict)))
    elif step == "split":
        say(
            "split",
            ", ".join(
                f"{s} {c['groups']} groups ({c['documents']} documents)" for s, c in state.split.items()
            ),
        )
        small = small_set_warning(state.settings, state.split["train"])
        if small:
            say("split", small)


def small_set_warning(settings: dict, train: dict) -> str | None:
    """The warning for a checkpoint adapted on fewer training groups than
    :data:`SMALL_TRAIN_GROUPS`, the smallest size measured to pay (None otherwise)."""
    groups = min(train["groups"], settings.get("max_train_groups") or train["groups"])
    if settings.get("model") is None or groups >= SMALL_TRAIN_GROUPS:
        return None
    return (
        f"warning: {groups} training groups; fine-tuning the shipped model was measured to pay from "
        f"{SMALL_TRAIN_GROUPS} (docs/bring-your-own-corpus.md) and may buy nothing below that: "
        "`pruner calibrate --model CHECKPOINT --data YOUR.jsonl` alone may be all you need "
        "(the report below compares the two)"
    )


def train(ctx: Context) -> dict:
    """Fine-tune (or train new heads) on the train split; resumes a trainer interrupted before."""
    import yaml
    from pruner_model.training.adapt import training_config
    from pruner_model.training.config import load_config
    from pruner_model.training.trainer import train as train_run

    settings, out = ctx.settings, ctx.out
    config_path = out / "train_config.yaml"
    config = training_config(settings, out, ctx.state.split["train"]["groups"])
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    cfg = load_config(config_path, settings.overrides)
    run_dir = out / "model"
    resume = (Path(str(run_dir) + ".trainer") / "last").exists()
    what = f"fine-tuning {settings.model}" if settings.model else f"training new heads on {ENCODER}"
    say("train", f"{what} ({'resumed' if resume else 'config ' + str(config_path)})")
    t0 = time.perf_counter()
    metrics = train_run(cfg, str(run_dir), resume=resume)
    if metrics.get("interrupted"):
        raise KeyboardInterrupt
    return {"seconds": round(time.perf_counter() - t0, 1), "steps": metrics.get("best_step")}


def mix(ctx: Context) -> dict:
    from pruner_model.adaptation.mix import mix_step

    if ctx.state.calibrate is not None:  # calibrated already: blending now would void its threshold
        return {"share": 1.0, "reason": "this adaptation was calibrated without a mix step"}
    if ctx.settings.model is None:
        return {"share": 1.0, "reason": f"started from {ENCODER}: no checkpoint to blend with"}
    return mix_step(ctx)


def calibrate(ctx: Context) -> dict:
    """The checkpoint's own calibration with the user's split as one more slice (``both``, where
    its recipe's files are here), else one threshold on the user's calibration split."""
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.calibrate import write_threshold
    from pruner_model.evaluation.sources import measure_sample

    settings, out = ctx.settings, ctx.out
    if settings.calibrate_on == "both":
        done = _calibrate_with_general(settings, out)
        if done is not None:
            return done
        say(
            "calibrate",
            f"{settings.model} has no calibration recipe here (its train_config.yaml's dev and calibration "
            "files): calibrating on your split alone",
        )
    records = sample_of(read_jsonl(ctx.data / "calibration.jsonl"), settings.sample_groups, settings.seed)
    pruner = ctx.runtime.load(out / "model")
    result = measure_sample(pruner, records, settings.target, settings.confidence, None, settings.seed)
    write_threshold(out / "model", pruner, result["threshold"], result["target"])
    say("calibrate", f"threshold {result['threshold']:.4f} on {result['groups']} calibration groups")
    return {
        "on": "yours",
        "threshold": result["threshold"],
        "target": result["target"],
        "groups": result["groups"],
    }


def _calibrate_with_general(settings: AdaptSettings, out: Path) -> dict | None:
    """The checkpoint's own calibration (training's, every slice of its recipe) run on the adapted
    model with the user's calibration split as one more source; None without a recipe to run."""
    import yaml
    from pruner_model.core.configuration import save_config
    from pruner_model.core.modeling import PrunerModel
    from pruner_model.training.adapt import general_calibration_config
    from pruner_model.training.calibration import calibrate as calibrate_model
    from pruner_model.training.config import load_config
    from pruner_model.training.data import read_records
    from transformers import AutoTokenizer

    recipe = general_calibration_config(settings, out)
    if recipe is None:
        return None
    path = out / "calibrate_config.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False), encoding="utf-8")
    cfg = load_config(path, settings.overrides)
    alone = settings.model is None  # no checkpoint, no slices of its own: your split and its shifted copies
    beside = (
        "its shifted copies"
        if alone
        else ", ".join(dict.fromkeys(cfg.data.dev + cfg.data.calibration_sources[:-1]))
    )
    say("calibrate", f"on your calibration split beside {beside}")
    model = PrunerModel.from_pretrained(str(out / "model")).eval()
    dev, _ = read_records(cfg.data.dev, None, cfg.data.dedup, cfg.data.seed)
    metrics = calibrate_model(model, AutoTokenizer.from_pretrained(str(out / "model")), cfg, dev)
    if metrics is None:
        return None
    save_config(model.config, out / "model")
    c = model.config
    say(
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
