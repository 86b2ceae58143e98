"""The report step of an adaptation: on the report split (never trained or calibrated on) the
checkpoint's default, the checkpoint recalibrated on the calibration split alone and the adapted
model, with what the scores allow at the promise and, given general text, what was forgotten;
and ``report.md``."""

from __future__ import annotations

import string
from pathlib import Path

from pruner_model.training.adapt import ENCODER, USER, sample_of

TEMPLATE = Path(__file__).with_name("report.md")  # report.md's Markdown, $-placeholders


def report_step(ctx) -> dict:
    from pruner_model.adaptation.progress import say
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.sources import measure_sample

    settings, out, state = ctx.settings, ctx.out, ctx.state

    n, seed = settings.sample_groups, settings.seed
    cal = sample_of(read_jsonl(out / "data" / "calibration.jsonl"), n, seed)
    report = sample_of(read_jsonl(out / "data" / "report.jsonl"), n, seed)
    rows, swept = {}, {"checkpoint": None}
    base = None if settings.model is None else ctx.runtime.load(Path(settings.model))
    if base is not None:
        recal = measure_sample(
            base, cal, settings.target, settings.confidence, None, settings.seed, memo=ctx.checkpoint_scores
        )["threshold"]
        base_on_report = points(base, report, {"recalibrated": recal}, settings.target)
        rows["checkpoint's default"] = base_on_report["default"]
        rows["checkpoint recalibrated on your calibration split"] = base_on_report["recalibrated"]
        swept["checkpoint"] = base_on_report["swept"]
    adapted = ctx.runtime.load(out / "model")
    on = (state.calibrate or {}).get("on", "yours")
    # calibrated on both, your split also got a named point of its own: text that is all yours
    own = (adapted.config.operating_points or {}).get(USER) if on == "both" else None
    adapted_on_report = points(adapted, report, {USER: own} if own else {}, settings.target)
    rows[_ADAPTED_ROW[on]] = adapted_on_report["default"]
    swept["adapted"] = adapted_on_report["swept"]
    if own:
        rows[f'adapted, at its "{USER}" operating point (your text alone)'] = adapted_on_report[USER]
    result = {
        "report_groups": adapted_on_report["groups"],
        "target": adapted_on_report["target"],
        "rows": rows,
        "at_target_swept": swept,
    }
    if settings.general_dev:
        general = general_records(settings.general_dev, settings.general_groups)
        after = points(adapted, general, {}, settings.target)
        before = None if base is None else points(base, general, {}, settings.target)
        result["general"] = {
            "file": settings.general_dev,
            "checkpoint": None if before is None else before["swept"],
            "adapted": after["swept"],
            # the adapted default is calibrated on your text: does it keep the promise here too?
            "defaults": {
                "checkpoint": None if before is None else _kept_and_compression(before),
                "adapted": _kept_and_compression(after),
            },
        }
    say(
        "report",
        "; ".join(
            f"{k}: kept {m['evidence_preserved']:.3f}, compression {m['compression']:.3f}"
            for k, m in rows.items()
        ),
    )
    return result


_ADAPTED_ROW = {
    "yours": "adapted, calibrated on your calibration split",
    "both": "adapted, calibrated on your calibration split and the checkpoint's own",
    "recipe": "trained on your train split, calibrated on your calibration split and its shifted copies",
}


def _kept_and_compression(measured: dict) -> list[float]:
    return [measured["default"]["evidence_preserved"], measured["default"]["compression"]]


def general_records(path: str, groups: int, skip: int = 0) -> list[dict]:
    """The records of ``groups`` query groups of ``path`` in file order, after the first ``skip``
    (the report measures the first ones; the mix step chooses on the next ones)."""
    from pruner_model.core.records import iter_jsonl
    from pruner_model.evaluation.groups import group_of

    seen, out = {}, []
    for rec in iter_jsonl(path):
        g = group_of(rec)
        if g not in seen:
            if len(seen) >= skip + groups:
                continue
            seen[g] = len(seen)
        if seen[g] >= skip:
            out.append(rec)
    return out


def points(pruner, records: list[dict], thresholds: dict, target, memo=None) -> dict:
    """``records`` scored once and measured at the checkpoint's default (``default``), at each
    named threshold (a number on the checkpoint's rule, or an operating point's ``{threshold,
    relative_floor}``), and swept (``swept``: the compression the scores allow at ``target``);
    ``memo``: a :class:`~pruner_model.evaluation.sources.ScoreMemo` of these weights."""
    from pruner_model.evaluation.groups import load_groups
    from pruner_model.evaluation.metrics import best_compression_at, sweep
    from pruner_model.evaluation.sources import at_operating_point, at_threshold, score_at_default

    cfg = pruner.config
    target = float(target if target is not None else (cfg.target_evidence or 0.95))
    groups = load_groups(records, cfg.segmenter_language, cfg.segmenter_structure)
    raw, ruled, default = score_at_default(pruner, groups, progress=True, memo=memo)
    out = {"groups": len(groups), "target": target}
    out["default"] = at_threshold(ruled, default, target)
    for name, t in thresholds.items():
        point = isinstance(t, dict)
        out[name] = (
            at_operating_point(cfg, raw, ruled, t, target) if point else at_threshold(ruled, float(t), target)
        )
    best = best_compression_at(sweep(ruled), target)
    out["swept"] = None if best is None else best["compression"]
    return out


def report_markdown(state) -> str:
    """``report.md``: the template beside this module filled in from ``adapt.json``'s results."""
    from pruner_model.adaptation.corpus import corpus_markdown

    r = state.report
    rows = []
    for name, m in r["rows"].items():
        ci = (m.get("promise") or {}).get("interval")
        ci_text = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        rows.append(f"| {name} | {m['evidence_preserved']:.3f}{ci_text} | {m['compression']:.3f} |")
    before = [
        *(corpus_markdown(state.corpus) if state.corpus else []),
        *(mix_markdown(state.mix) if state.mix else []),
    ]
    return string.Template(TEMPLATE.read_text(encoding="utf-8")).substitute(
        model=state.settings["model"] or ENCODER,
        labeled=", ".join(state.settings["labeled"]),
        splits="\n".join(
            f"| {s} | {c['groups']} | {c['documents']} | {c['with_answer']} |" for s, c in state.split.items()
        ),
        before_training="".join(line + "\n" for line in before),
        trained="Fine-tuning" if state.settings["model"] else "Training",
        minutes=f"{state.train['seconds'] / 60:.1f}",
        groups=r["report_groups"],
        target=r["target"],
        rows="\n".join(rows),
        swept=_pair(r["at_target_swept"]),
        general="".join("\n" + line for line in _general_lines(state)),
    )


def _general_lines(state) -> list[str]:
    """What the adaptation forgot of general text, and the defaults there (none without it)."""
    g = state.report.get("general")
    if not g:
        return []
    lines = [
        f"On general text ({g['file']}), the same: {_pair(g)}"
        + (" (a fall here is what the adaptation forgot)." if g["checkpoint"] is not None else ".")
    ]
    if g.get("defaults"):  # absent from adapt.json files written without the defaults line
        kept = {k: v for k, v in g["defaults"].items() if v is not None}
        lines.append(
            ("There, at each model's default: " if len(kept) > 1 else "There, at its default: ")
            + ", ".join(
                f"{_MODEL[k] if len(kept) == 1 else k} kept {v[0]:.3f} / compression {v[1]:.3f}"
                if i == 0
                else f"{k} {v[0]:.3f} / {v[1]:.3f}"
                for i, (k, v) in enumerate(kept.items())
            )
            + _GENERAL_NOTE[(state.calibrate or {}).get("on", "yours")]
        )
    return lines


_GENERAL_NOTE = {  # after the general-text defaults line, by what the default was calibrated on
    "both": " (calibrated on both: the promise holds here too).",
    "yours": " (the adapted threshold is calibrated on your text: if you also serve text like this, check "
    "that its answers are still kept, or adapt with --calibrate-on both).",
    "recipe": " (trained and calibrated on your text alone: if you also serve text like this, check that "
    "its answers are still kept).",
}


_MODEL = {"adapted": "trained model", "checkpoint": "checkpoint"}  # a row's name where it stands alone


def _pair(measured: dict) -> str:
    """``checkpoint X, adapted Y`` (``trained model Y`` alone without a checkpoint)."""
    if measured["checkpoint"] is None:
        return f"trained model {num(measured['adapted'])}"
    return f"checkpoint {num(measured['checkpoint'])}, adapted {num(measured['adapted'])}"


def num(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def mix_markdown(mix: dict) -> list[str]:
    """The mix step's lines of ``report.md``."""
    if not mix.get("rows"):
        return [f"Weights: as trained ({mix['reason']}).", ""]
    g = mix["general"]
    share = mix["share"]
    weights = (
        "the fine-tuned ones as trained"
        if share == 1.0
        else "the checkpoint's as they were"
        if share == 0.0
        else f"{share:g} of the fine-tuned ones and {1 - share:g} of the checkpoint's"
    )
    lines = [
        f"Weights: {weights}, chosen as {mix['reason']}. Compression at the promise, threshold swept, on your calibration "
        f"split and on {g['groups']} groups of {g['file']} that the report below does not use:",
        "",
        "| share of fine-tuned weights | your calibration split | general text |",
        "|---|---|---|",
    ]
    rows = sorted(mix["rows"], key=lambda r: -r["share"])
    lines += [f"| {r['share']:g} | {num(r['yours'])} | {num(r['general'])} |" for r in rows]
    return [*lines, ""]
