"""The learning curve of `pruner adapt`: compression on the report split against the training
groups, from the ``adapt.json`` of runs that differ only in ``--max-train-groups`` (same labeled
file, same split):

    python experiments/adapt_curve.py /tmp/adapt_nq100 /tmp/adapt_nq300 /tmp/adapt_nq \\
        --title nq --output docs/adapt_curve_nq.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="adapt output folders")
    p.add_argument("--title", default="")
    p.add_argument("--output", required=True)
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = []
    for run in args.runs:
        state = json.loads((Path(run) / "adapt.json").read_text())
        n = state["settings"].get("max_train_groups") or state["split"]["train"]["groups"]
        n = min(n, state["split"]["train"]["groups"])
        rows = list(state["report"]["rows"].values())
        points.append((n, rows, state["report"]["at_target_swept"]["adapted"], state["report"]["target"]))
    points.sort(key=lambda x: x[0])
    base, recal = points[0][1][0], points[0][1][1]
    xs = [x[0] for x in points]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, [x[1][2]["compression"] for x in points], "o-", label="adapted, at its calibrated default")
    ax.plot(xs, [x[2] for x in points], "s--", label="adapted, threshold swept on the report split")
    ax.axhline(base["compression"], color="gray", label="checkpoint's default")
    ax.axhline(recal["compression"], color="gray", ls=":", label="checkpoint recalibrated alone")
    for n, rows, _, _ in points:
        ax.annotate(f"kept {rows[2]['evidence_preserved']:.3f}", (n, rows[2]["compression"]), fontsize=8,
                    textcoords="offset points", xytext=(4, -12))  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("your labeled training groups (log scale)")
    ax.set_ylabel(f"compression on the report split (target {points[0][3]})")
    ax.set_title(f"pruner adapt: {args.title}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    for n, rows, swept, _ in points:
        print(n, round(rows[2]["evidence_preserved"], 3), round(rows[2]["compression"], 3), swept)


if __name__ == "__main__":
    main()
