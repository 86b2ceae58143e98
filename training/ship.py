"""Write a trained checkpoint as the package's default model: bf16 safetensors (half the bytes of
fp32; every backend loads them back as fp32), tokenizer, ``config.json`` with its calibrated
operating point, the run's model card and the held-back measurements (``evaluation.json``).

``python3 -m pruner_model.training.ship RUN [--output FOLDER]`` (``scripts/build_default_model.sh``
runs it after training); the output defaults to ``pruner_model/default_model`` of this source tree.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

MAX_BYTES = 50 * 1024 * 1024  # the wheel carries the model: at most 50 MB
CARRIED = ("README.md", "metrics.json", "train_config.yaml", "int8_smoothing.safetensors")
# besides weights, config and tokenizer; train_config.yaml is the recipe `pruner adapt` replays and
# calibrates with; int8_smoothing.safetensors the channel maxima a labeled int8 export smoothed with
# (`pruner export --quantize int8` smooths with them where it has no labels)
CARD_SECTION = """
## Measured on held-back data

At the shipped default (no settings), on groups of 5 passages as a retriever hands them over
(`pruner data qa`: the gold passage, one more of its document, two TF-IDF look-alikes, one random;
15% of answerable questions lose their gold passage). *dev*: documents of a training set that
training and calibration never saw; *heldout*: whole data sets no shipped config trains or
calibrates on. Measured in fp32 with `pruner evaluate --by-source --max-groups 300 --dtype fp32 --data
data/qa/<split>.jsonl` (scripts/build_default_model.sh). Passage-level sets (BoolQ, PubMedQA) have no sentence labels.

{table}"""


INT8_SECTION = """
## int8

`int8_smoothing.safetensors` holds the channel maxima of each layer's feed-forward output
projection input, measured by a labeled int8 export of this model (`pruner export --quantize int8
--calibration-data`) on {source}; judged on its labeled groups, the smoothed all-int8 graph kept
fp32's evidence within 0.5 point and its compression within 1 point. `pruner export --quantize
int8` smooths with them, so the export runs every layer in int8 with no labeled data at hand.
"""

SPLITS = {"dev": "held-back documents of a training set", "heldout": "a whole data set never trained on"}


def measured(evaluation: Path) -> tuple[dict, str]:
    """``(rows, markdown)`` from ``pruner evaluate --by-source`` reports in ``evaluation/<split>/``
    (``sources.json``): per set, at the shipped default, answers kept with the exact 95% interval,
    compression, the share of tokens that answer-less groups keep, and compression at 95% kept."""
    rows = {}
    for split in SPLITS:
        path = evaluation / split / "sources.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing (pruner evaluate --by-source --output {path.parent})")
        report = json.loads(path.read_text(encoding="utf-8"))
        for name, m in report["sources"].items():
            at = m.get("at_checkpoint_threshold") or {}
            kept = m.get("tokens_kept_at_checkpoint") or {}
            rows[name] = {
                "split": split,
                "groups": m["groups"],
                "max_groups": report.get("max_groups"),
                "evidence_preserved": at.get("evidence_preserved"),
                "interval": (at.get("promise") or {}).get("interval"),
                "compression": at.get("compression"),
                "answerless_tokens_kept": kept.get("answerless"),
                "compression_at_0.95": m.get("compression_at_0.95"),
                "gold_ranked_first": m["ranking"].get("gold_first"),
                "verdict": (at.get("promise") or {}).get("verdict"),
                "target": (at.get("promise") or {}).get("target"),
            }
    return {"sets": rows, "check": _check(evaluation / "check")}, _markdown(rows)


def _check(folder: Path) -> dict | None:
    """The fixed slice a test measures again (``pruner evaluate --by-source`` in ``folder``): per set,
    answers kept and compression at the default."""
    path = folder / "sources.json"
    if not path.is_file():
        return None
    report = json.loads(path.read_text(encoding="utf-8"))
    sets = {
        name: {k: m["at_checkpoint_threshold"][k] for k in ("evidence_preserved", "compression")}
        for name, m in report["sources"].items()
        if m.get("at_checkpoint_threshold")
    }
    return {"data": "data/qa/heldout.jsonl", "max_groups": report.get("max_groups"), "sets": sets}


def _num(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def _markdown(rows: dict) -> str:
    lines = [
        "| set | split | groups | answers kept [95% interval] | compression | answer-less groups: tokens kept "
        "| compression at 95% kept (swept) | gold passage ranked first |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        ci = r["interval"]
        kept = (
            "– (passage-level labels)"
            if r["evidence_preserved"] is None
            else (f"{_num(r['evidence_preserved'])} [{_num(ci[0])}, {_num(ci[1])}]")
        )
        lines.append(
            f"| {name} | {r['split']} | {r['groups']} | {kept} | {_num(r['compression'])} | "
            f"{_num(r['answerless_tokens_kept'])} | {_num(r['compression_at_0.95'])} | {_num(r['gold_ranked_first'])} |"
        )
    return "\n".join(lines) + "\n" + _promise(rows)


def _promise(rows: dict) -> str:
    """Where the default keeps its promise and where it does not, in a sentence (nothing when the
    reports carry no verdicts)."""
    judged = {n: r for n, r in rows.items() if r.get("verdict")}
    if not judged:
        return ""
    target = next(iter(judged.values())).get("target") or 0.95
    holds = [n for n, r in judged.items() if r["verdict"] != "missed"]
    missed = [
        f"{n} ({r['evidence_preserved']:.3f} kept)" for n, r in judged.items() if r["verdict"] == "missed"
    ]
    text = (
        f"\nAt the default, the promise ({target:.0%} of questions keep every answer sentence) holds or is "
    )
    text += f"within chance on {', '.join(holds) or 'none of these sets'}"
    text += f"; it is missed on {' and '.join(missed)}" if missed else ""
    return text + (
        ": on such text, calibrate on a labeled sample of it (`pruner calibrate`, above).\n"
        if missed
        else ".\n"
    )


DATA_SECTION = """
## Training data and licences

Read by `pruner data qa` from the public QA files in their published formats (docs/data.md);
every set here may train a distributed model. Never trained or calibrated on: {heldout}.

| set | text | licence | questions read | files |
|---|---|---|---|---|
{rows}
"""


def data_section(report_path: Path, mix: dict) -> str:
    """The card's data table from ``pruner data qa``'s ``report.json``: the sets of ``mix``."""
    report = json.loads(Path(report_path).read_text(encoding="utf-8"))
    sets = report["sets"]
    missing = [name for name in mix if name not in sets]
    if missing:
        raise ValueError(f"{report_path}: no set {missing[0]!r} of the training mix")
    if any(not sets[name].get("distributable", True) for name in mix):
        raise ValueError(f"{report_path}: the mix holds an evaluation-only set: it may not ship")
    rows = "\n".join(
        f"| {name} | {sets[name]['text']} | {sets[name]['licence']} | {sets[name]['questions']} | "
        + ", ".join(f"`{f}`" for f in sets[name]["files"])
        + " |"
        for name in mix
    )
    heldout = ", ".join(report.get("settings", {}).get("heldout") or []) or "none named"
    return DATA_SECTION.format(rows=rows, heldout=heldout)


def _card_sections(staging: Path, run: Path, evaluation, data_report) -> None:
    """The shipped model's own sections of the card in ``staging``: its data and licences, its
    held-back measurements (also as ``evaluation.json``) and its int8 smoothing, where given."""
    card = staging / "README.md"
    sections = []
    if data_report is not None:
        import yaml

        mix = (yaml.safe_load((run / "train_config.yaml").read_text()).get("data") or {}).get("mix") or {}
        sections.append(data_section(Path(data_report), mix))
    if evaluation is not None:
        rows, table = measured(Path(evaluation))
        (staging / "evaluation.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        sections.append(CARD_SECTION.format(table=table))
    if (staging / "int8_smoothing.safetensors").is_file():
        from safetensors import safe_open

        with safe_open(str(staging / "int8_smoothing.safetensors"), framework="numpy") as f:
            sections.append(INT8_SECTION.format(source=(f.metadata() or {}).get("source", "labeled groups")))
    if sections:
        card.write_text(card.read_text(encoding="utf-8") + "".join(sections), encoding="utf-8")


def refresh_measurements(folder: str | Path, evaluation: str | Path) -> Path:
    """Rewrite a shipped folder's ``evaluation.json`` and its card's measured section from new
    ``pruner evaluate`` reports (after its operating point changed), weights and the rest untouched;
    each file is replaced whole."""
    folder = Path(folder)
    card_path = folder / "README.md"
    card = card_path.read_text(encoding="utf-8")
    head = CARD_SECTION.split("\n")[1]  # "## Measured on held-back data"
    if head not in card:
        raise ValueError(f"{card_path}: no '{head}' section to replace")
    rows, table = measured(Path(evaluation))
    start = card.index(head) - 1  # the blank line before it
    end = card.find("\n## ", start + len(head) + 1)
    card = card[:start] + CARD_SECTION.format(table=table) + ("" if end < 0 else card[end:])
    from pruner_model.core.records import atomic_open

    for path, text in ((folder / "evaluation.json", json.dumps(rows, indent=1) + "\n"), (card_path, card)):
        with atomic_open(path) as fh:
            fh.write(text)
    return folder


def ship(
    run: str | Path,
    output: str | Path,
    evaluation: str | Path | None = None,
    data_report: str | Path | None = None,
) -> Path:
    """Write ``run`` (a checkpoint folder) to ``output`` in bf16, whole or not at all; with
    ``evaluation``, its held-back measurements go into ``evaluation.json`` and the model card;
    with ``data_report`` (``pruner data qa``'s report.json), its data sets and licences."""
    import torch
    from pruner_model.core.modeling import PrunerModel
    from transformers import AutoTokenizer

    run, output = Path(run), Path(output)
    if not (run / "model.safetensors").is_file():
        raise FileNotFoundError(f"{run}: no model.safetensors (give a trained checkpoint folder)")
    model = PrunerModel.from_pretrained(str(run)).to(torch.bfloat16)
    staging = Path(tempfile.mkdtemp(prefix=".ship-", dir=output.parent if output.parent.is_dir() else None))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        AutoTokenizer.from_pretrained(str(run)).save_pretrained(staging)
        for name in CARRIED:
            if (run / name).is_file():
                shutil.copy2(run / name, staging / name)
        _card_sections(staging, run, evaluation, data_report)
        size = sum(f.stat().st_size for f in staging.iterdir())
        if size > MAX_BYTES:
            raise ValueError(
                f"{run}: {size / 2**20:.1f} MiB in bf16, over the {MAX_BYTES // 2**20} MiB a wheel may carry"
            )
        staging.chmod(0o755)  # the package's files are readable by every user
        for f in staging.iterdir():
            f.chmod(0o644)
        if output.exists():
            shutil.rmtree(output)
        staging.rename(output)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return output


def main(argv: list[str] | None = None) -> int:
    from pruner_model.core.default_model import default_model_path

    p = argparse.ArgumentParser(prog="python3 -m pruner_model.training.ship", description=__doc__)
    p.add_argument("run", help="a trained checkpoint folder (pruner train --output)")
    p.add_argument("--output", default=None, help="default: the package's default_model folder")
    p.add_argument(
        "--evaluation",
        default=None,
        help="a folder with dev/ and heldout/ reports of pruner evaluate --by-source: written into "
        "evaluation.json and the model card",
    )
    p.add_argument(
        "--data-report",
        default=None,
        help="pruner data qa's report.json: the card lists the sets and licences",
    )
    p.add_argument(
        "--measurements-only",
        action="store_true",
        help="RUN is a shipped folder: rewrite its evaluation.json and its card's measured section "
        "from --evaluation, weights untouched (after its operating point changed)",
    )
    args = p.parse_args(argv)
    try:
        if args.measurements_only:
            if args.evaluation is None:
                raise ValueError("--measurements-only needs --evaluation")
            out = refresh_measurements(args.run, args.evaluation)
            print(f"rewrote the measurements of {out}", file=sys.stderr)
            return 0
        out = ship(args.run, args.output or default_model_path(), args.evaluation, args.data_report)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in out.iterdir()) / 2**20
    print(f"wrote the default model to {out} ({size:.1f} MiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
