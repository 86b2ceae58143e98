"""The learning curves of `pruner adapt`: compression on the report split against the training
groups, from the ``adapt.json`` of runs that differ only in ``--max-train-groups`` (same labeled
file, same split); one panel per labeled file:

    python experiments/adapt_curve.py runs/adapt_friendsqa_doc_{100,200,600} --output docs/adapt_curve.png

Prints the table and writes the figure to ``--output``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _points(runs: list[str]) -> dict[str, list]:
    """Per labeled file: ``(groups, rows, swept, target, general)`` of each run, by groups."""
    by_file: dict[str, list] = {}
    for run in runs:
        state = json.loads((Path(run) / "adapt.json").read_text())
        n = state["settings"].get("max_train_groups") or state["split"]["train"]["groups"]
        n = min(n, state["split"]["train"]["groups"])
        rows = list(state["report"]["rows"].values())
        general = (state["report"].get("general") or {}).get("adapted")
        name = Path(state["settings"]["labeled"][0]).stem.removesuffix("_all")
        if name == "all":  # a folder's splits concatenated: its records name the set
            with open(state["settings"]["labeled"][0], encoding="utf-8") as f:
                name = json.loads(f.readline()).get("source") or name
        swept = state["report"]["at_target_swept"]
        by_file.setdefault(name, []).append((n, rows, swept, state["report"]["target"], general))
    return {k: sorted(v, key=lambda x: x[0]) for k, v in by_file.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="adapt output folders")
    p.add_argument("--output", required=True)
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = _points(args.runs)
    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4.5), squeeze=False)
    for ax, (name, points) in zip(axes[0], curves.items()):
        recal = points[0][1][1]
        xs = [x[0] for x in points]
        ax.plot(
            xs, [x[1][2]["compression"] for x in points], "o-", label="adapted, at its calibrated default"
        )
        ax.plot(
            xs, [x[2]["adapted"] for x in points], "s--", label="adapted, threshold swept on the report split"
        )
        ax.axhline(
            points[0][2]["checkpoint"], color="gray", ls="--", label="checkpoint, threshold swept there"
        )
        ax.axhline(recal["compression"], color="gray", ls=":", label="checkpoint recalibrated alone")
        for n, rows, _, _, _ in points:
            ax.annotate(f"kept {rows[2]['evidence_preserved']:.3f}", (n, rows[2]["compression"]), fontsize=8,
                        textcoords="offset points", xytext=(4, -12))  # fmt: skip
        ax.set_xscale("log")
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.minorticks_off()
        ax.set_xlabel("your labeled training groups (log scale)")
        ax.set_ylabel(f"compression on the report split (target {points[0][3]})")
        ax.set_title(f"{name} as your corpus")
        for n, rows, swept, _, general in points:
            print(name, n, round(rows[2]["evidence_preserved"], 3), round(rows[2]["compression"], 3),
                  round(swept["adapted"], 3), general and round(general, 3))  # fmt: skip
    axes[0][0].legend(fontsize=8)
    fig.suptitle("pruner adapt from the shipped model")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


if __name__ == "__main__":
    main()
