"""The model card (``README.md`` with YAML metadata) written into every published checkpoint,
so the folder can go to a model hub as it is."""

from __future__ import annotations

import string
from pathlib import Path

import yaml


def _fmt(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


TEMPLATE = Path(__file__).with_name("model_card.md")  # the card's Markdown, $-placeholders
METRIC_ROWS = (
    "evidence_preserved",
    "compression",
    "word_compression",
    "precision",
    "recall",
    "f1",
    "token_auc",
)


def write_model_card(output: Path, cfg, config, metrics: dict) -> Path:
    """Write ``output/README.md``: base model, data, metrics at the calibrated threshold, intended
    use and limits (``model_card.md`` filled in). Returns its path."""
    dev = metrics.get("dev", {})
    target = cfg.calibration.target_evidence
    shifts = cfg.calibration.shifts
    shifted = (
        f"; the lowest threshold that meets it on the calibration groups and their {', '.join(shifts)} slices"
        if shifts
        else ""
    )
    rows = "\n".join(f"| {k} | {_fmt(dev[k])} |" for k in METRIC_ROWS if k in dev)
    floor = getattr(config, "relative_floor", None)
    body = string.Template(TEMPLATE.read_text(encoding="utf-8")).substitute(
        name=output.name,
        base=_base(cfg),
        train_files=", ".join(f"`{f}`" for f in cfg.data.train),
        mix=_mix(cfg),
        max_length=config.max_length,
        stride=config.stride,
        sentence_loss_weight=config.sentence_loss_weight,
        best_step=metrics.get("best_step"),
        best_metric=cfg.train.best_metric,
        teacher=_teacher(cfg, config),
        precision=_precision(metrics.get("precision")),
        operating_point=_operating_point(
            config, target, floor, shifted, "calibration" in metrics, bool(rows)
        ),
        rows=f"\n| metric | value |\n|---|---|\n{rows}" if rows else "",
        promise=_promise(dev.get("promise")),
        named_points=_named_points(config, target),
        languages=_languages(cfg),
    )
    meta = _metadata(output, cfg, dev)
    path = Path(output) / "README.md"
    path.write_text("---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n\n" + body, encoding="utf-8")
    return path


def _base(cfg) -> str:
    return cfg.model.init_from or cfg.model.backbone or "sentence-transformers/all-MiniLM-L6-v2"


def _metadata(output: Path, cfg, dev: dict) -> dict:
    """The card's YAML header: licence, base model, tags, data and the model-index metrics."""
    metrics = [
        {"type": k, "value": float(dev[k])}
        for k in ("evidence_preserved", "compression", "f1", "token_auc")
        if k in dev
    ]
    result = {
        "task": {"type": "context-pruning", "name": "RAG context pruning"},
        "dataset": {"name": ", ".join(map(str, cfg.data.dev)), "type": "labeled-records"},
        "metrics": metrics,
    }
    return {
        "license": "apache-2.0",
        "library_name": "pruner-model",
        "base_model": _base(cfg),
        "pipeline_tag": "token-classification",
        "tags": ["rag", "context-pruning", "provence", "pruner-model"],
        "datasets": [str(f) for f in cfg.data.train],
        "model-index": [{"name": output.name, "results": [result]}],
    }


def _operating_point(config, target: float, floor, shifted: str, calibrated: bool, measured: bool) -> str:
    """The card's operating-point paragraph; it ends by announcing the dev table when the run
    measured one (``measured``), else with a full stop."""
    unseen = "dev groups that were not used to calibrate it:"
    announce = f" Measured on {unseen}" if measured else ""
    if not calibrated:  # no promise without calibration: the threshold is only a default
        return (
            f"Threshold **{config.threshold:.4f}**, **not calibrated** (calibration was off or had no "
            "dev groups): no share of queries keeping their evidence is promised. Calibrate it on "
            "labeled data (`pruner evaluate --write-threshold`) before relying on it."
            + (" Measured on dev groups:" if measured else "")
        )
    rule = (
        f"relative floor {floor}, relevance exponent {getattr(config, 'relevance_exponent', 0.0)}, "
        f"relevance contrast {getattr(config, 'relevance_contrast', 0.0)}"
    )
    if getattr(config, "threshold_model", None) is not None:
        tm = config.threshold_model
        gate = tm.get("min_relevance")
        return (
            f"A **per-request threshold** for {target:.0%} of queries keeping all their evidence ({rule}): "
            f"each request falls in one of {len(tm['thresholds'])} bands by what it shows (its score profile, "
            "the relevance head's confidence, the question's form, the passages' style"
            + (
                f"; banded by the threshold of the calibration slices it resembles: {', '.join(tm['sources'])}"
                if tm.get("sources")
                else ""
            )
            + "), and each band's "
            f"threshold ({', '.join(f'{t:.4f}' for t in tm['thresholds'])}) was chosen so that every "
            "calibration slice keeps the target"
            + (
                "; requests the features rate unlikely to hold an answer at all get a band threshold of "
                f"their own ({', '.join(f'{t:.4f}' for t in tm['unlikely_thresholds'])})"
                if tm.get("unlikely_thresholds")
                else ""
            )
            + (f", behind a passage relevance gate of {gate}" if gate is not None else "")
            + (
                "; a request unlike all of the calibration text (its features far from every "
                "calibration request: `calibration.per_request_novelty`) gets at most "
                f"{tm['novelty_threshold']:.4f}, the threshold under which every calibration slice keeps "
                "a stricter share of its answers"
                + (
                    f" and a relevance gate of {tm['novelty_min_relevance']} (`calibration.unfamiliar_gate`)"
                    if tm.get("novelty_min_relevance") is not None
                    else ""
                )
                + ", and `stats.unfamiliar` says so"
                if tm.get("novelty_threshold") is not None
                else ""
            )
            + f". `threshold={config.threshold:.4f}` is the one threshold that holds on every slice at once"
            f"{shifted}; it keeps more on most text.{announce}"
        )
    return (
        f"Calibrated threshold **{config.threshold:.4f}** for {target:.0%} of queries keeping all their "
        f"evidence ({rule}){shifted}" + (f", measured on {unseen}" if measured else ".")
    )


def _recalibration(target: float) -> str:
    return f"""
For text like none of these, calibrate on a labeled sample of yours (a few hundred questions, as
`pruner annotate` writes them): `pruner calibrate --model DIR --data mine.jsonl` makes the
threshold that keeps {target:.0%} of its answers this checkpoint's default (`--name NAME` adds it as
an operating point instead), and `pruner adapt --labeled mine.jsonl --model DIR --output OUT`
fine-tunes on it and calibrates on it beside this checkpoint's own slices
(docs/bring-your-own-corpus.md).
"""


def _named_points(config, target: float) -> str:
    points = getattr(config, "operating_points", None)
    if not points:
        return _recalibration(target)
    rows = "\n".join(
        f"| `{name}` | {p['threshold']:.4f} | {'none (absolute)' if p['relative_floor'] is None else p['relative_floor']} |"
        for name, p in sorted(points.items())
    )
    return f"""
Named operating points: each the threshold and relative floor that keep {target:.0%} of the
evidence on one calibration source alone (same relevance exponent). Use one for text like that
source only: `pruner.prune(query, passages, operating_point="NAME")`.

| operating point | threshold | relative floor |
|---|---|---|
{rows}
""" + _recalibration(target)


def _teacher(cfg, config) -> str:
    """The relevance distillation teacher, when the run had one."""
    weight = getattr(config, "relevance_distill_weight", 0.0)
    if not weight:
        return ""
    teacher = getattr(cfg.model, "relevance_teacher", None) or "the bundled all-MiniLM-L6-v2"
    teacher = teacher.removeprefix("the ")
    return (
        f"\n- relevance distillation (weight {weight}, temperature {config.relevance_distill_temperature}):"
        f" each query's distractors ordered as the {teacher} bi-encoder orders them"
    )


def _mix(cfg) -> str:
    """The sources and their shares of the training groups (``data.mix``; docs/data.md), and the
    sources the threshold was calibrated on."""
    d = cfg.data
    out = ""
    if d.mix:
        total = sum(d.mix.values())
        shares = ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(d.mix.items(), key=lambda kv: -kv[1]))
        out += f"; {d.max_train_groups} query groups drawn by source: {shares}"
    if d.calibration_sources:
        out += (
            f"; the threshold also calibrated on every source of {', '.join(map(str, d.calibration_sources))}"
        )
    return out


def _languages(cfg) -> str:
    """The languages of the training sources (docs/data.md): what the card promises to work in."""
    from pruner_model.core.records import LANGUAGE_NAME
    from pruner_model.core.records import SOURCE_LANGUAGE as LANGUAGE

    trained = sorted(
        {LANGUAGE.get(s, "en") for s in (cfg.data.mix or {"squad": 1})}, key=lambda c: (c != "en", c)
    )
    if trained == ["en"]:
        return "in English"
    return (
        f"in the languages it was trained and calibrated on ({', '.join(LANGUAGE_NAME.get(c, c) for c in trained)}); "
        "its encoder reads about 100 languages, but no other language was trained or measured"
    )


def _precision(p: dict | None) -> str:
    if not p:
        return ""
    m = p.get("machine", {})
    where = f"GPU {m['gpu']}" if m.get("gpu") else f"a CPU of class {m.get('cpu_class', '?')}"
    return (
        f"- precision: trained in {p['training']}, calibrated and reported in {p['calibration']}, on "
        f"{where} (torch CPU capability {m.get('cpu_capability', '?')})"
    )


def _promise(p: dict | None) -> str:
    if not p:
        return ""
    lo, hi = p["interval"]
    return (
        f"\nThe threshold kept every answer of {p['kept']} of these {p['queries']} queries with evidence "
        f"({p['share']:.3f}; exact {p['level']:.0%} interval {lo:.3f}–{hi:.3f}): promise **{p['verdict']}**.\n"
    )
