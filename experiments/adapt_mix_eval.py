"""What `pruner adapt`'s mix step bought: for each adaptation folder, the blend it published
(``OUTPUT/model``) against the fine-tuned weights as trained (``OUTPUT/model.trained``) and the
starting checkpoint, on the folder's report split and on the general groups its report used
(never the ones the mix step chose on). Compression at the promise with the threshold swept on
each set, so the three rows differ only in their weights:

    python experiments/adapt_mix_eval.py runs/adapt_friendsqa runs/adapt_covidqa

Prints one table row per folder and weights.

A folder whose mix kept the weights as trained has no ``model.trained``: its row is printed once.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pruner_model.adaptation.report import general_records, points
from pruner_model.core.records import read_jsonl
from pruner_model.inference import ContextPruner


def evaluate(folder: Path, backend: str = "auto") -> list[dict]:
    """One row per weights (checkpoint, as trained, published blend): swept compression on the
    report split and on the report's general groups."""
    state = json.loads((folder / "adapt.json").read_text())
    settings, mix = state["settings"], state.get("mix") or {}
    report = read_jsonl(folder / "data" / "report.jsonl")
    general = (
        general_records(settings["general_dev"], settings["general_groups"])
        if settings.get("general_dev")
        else []
    )
    models = {"checkpoint": Path(settings["model"])}
    if (folder / "model.trained").is_dir():
        models["fine-tuned, as trained"] = folder / "model.trained"
    models[f"published (share {mix.get('share', 1.0):g})"] = folder / "model"
    rows = []
    for name, path in models.items():
        pruner = ContextPruner.from_pretrained(path, backend=backend)
        mine = points(pruner, report, {}, settings.get("target"))
        rows.append(
            {
                "folder": str(folder),
                "weights": name,
                "report_swept": mine["swept"],
                "general_swept": points(pruner, general, {}, mine["target"])["swept"] if general else None,
            }
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="pruner adapt output folders")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = p.parse_args()
    rows = [r for folder in args.folders for r in evaluate(folder)]
    print("| adaptation | weights | report split, swept | general text (report's groups), swept |")
    print("|---|---|---|---|")
    for r in rows:
        cells = [f"{v:.3f}" if isinstance(v, float) else "-" for v in (r["report_swept"], r["general_swept"])]
        print(f"| {Path(r['folder']).name} | {r['weights']} | {cells[0]} | {cells[1]} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
