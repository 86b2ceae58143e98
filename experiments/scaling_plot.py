"""How the quickstart recipe scales with training query groups: the selection-group metrics of runs
that differ only in ``data.max_train_groups`` (each scored with ``experiments/selection_split.py
--json``), as a table and a figure, with a log-linear fit of each source's gold-first share
against the number of groups (how many groups the fit needs to rank the gold passage first for
``--goal`` of the questions: an extrapolation, printed as such).

    python experiments/scaling_plot.py --point 1300=runs/a.json --point 1300=runs/b.json \\
        --point 1800=runs/c.json --output docs/scaling.png

Several points with the same number of groups (seeds) are averaged; the figure draws each run.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict

SOURCES = ("cosmosqa", "multirc", "nq", "quoref", "squad")
PANELS = (
    ("gold passage ranked first", lambda m: m["ranking"]["gold_first"]),
    ("gold above a random passage", lambda m: m["ranking"].get("gold_over_random")),
    ("compression at 95% of answers kept", lambda m: m.get("compression_at_0.95")),
    ("random passages' tokens kept at 95%", lambda m: (m.get("tokens_kept_at_0.95") or {}).get("random")),
)


def read_points(specs: list[str]) -> dict[int, list[dict]]:
    """``{groups: [per-source metrics of each run]}`` from ``N=path.json`` arguments."""
    points: dict[int, list[dict]] = defaultdict(list)
    for spec in specs:
        n, _, path = spec.partition("=")
        if not path or not n.isdigit():
            raise SystemExit(f"Error: --point takes GROUPS=PATH.json, got {spec!r}")
        try:
            with open(path) as f:
                points[int(n)].append(json.load(f)["sources"])
        except (OSError, ValueError, KeyError) as exc:
            raise SystemExit(
                f"Error: {path}: not a selection_split.py --json file ({type(exc).__name__}: {exc})"
            ) from None
    return dict(sorted(points.items()))


def value(runs: list[dict], source: str, get) -> float | None:
    """The mean over runs of one metric of one source (None where no run has it)."""
    vals = [get(r[source]) for r in runs if source in r]
    vals = [v for v in vals if v is not None]
    return sum(vals) / len(vals) if vals else None


def loglinear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares ``y = a + b log10(x)``: ``(a, b)``."""
    lx = [math.log10(x) for x in xs]
    mx, my = sum(lx) / len(lx), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in lx)
    b = sum((x - mx) * (y - my) for x, y in zip(lx, ys)) / sxx
    return my - b * mx, b


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--point", action="append", required=True, help="GROUPS=selection.json (repeat)")
    p.add_argument("--output", default=None, help="write the figure here (PNG)")
    p.add_argument("--goal", type=float, default=0.90, help="gold-first share to extrapolate to")
    args = p.parse_args()
    points = read_points(args.point)
    ns = list(points)
    for title, get in PANELS:
        print(f"\n{title}\nsource | " + " | ".join(str(n) for n in ns))
        for src in SOURCES:
            row = [value(points[n], src, get) for n in ns]
            print(f"{src} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in row))
    if len(ns) > 1:
        print(f"\nlog-linear fit of gold first against groups (extrapolated to {args.goal:.2f}):")
        for src in SOURCES:
            xs = [n for n in ns if value(points[n], src, PANELS[0][1]) is not None]
            ys = [value(points[n], src, PANELS[0][1]) for n in xs]
            if len(xs) < 2:
                continue
            a, b = loglinear_fit(xs, ys)
            need = "already reached" if max(ys) >= args.goal else "never (flat or falling)"
            if max(ys) < args.goal and b > 0:
                need = f"at about {10 ** ((args.goal - a) / b):,.0f} groups"
            print(f"  {src}: {b:+.3f} per tenfold groups; {args.goal:.2f} {need}")
    if args.output:
        plot(points, args.output)
        print(f"figure: {args.output}")


def plot(points: dict[int, list[dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.6))
    colors = {src: f"C{k}" for k, src in enumerate(SOURCES)}  # one colour per source in every panel
    for ax, (title, get) in zip(axes, PANELS):
        for src in SOURCES:
            xs = [n for n in points if value(points[n], src, get) is not None]
            if not xs:
                continue
            ys = [value(points[n], src, get) for n in xs]
            ax.plot(xs, ys, marker="o", label=src, color=colors[src])
            for n in xs:  # each run, where there are several
                runs = [get(r[src]) for r in points[n] if src in r and get(r[src]) is not None]
                if len(runs) > 1:
                    ax.scatter([n] * len(runs), runs, s=10, color=colors[src], alpha=0.5)
        ax.set_xscale("log")
        ax.set_xticks(list(points), [str(n) for n in points])
        ax.minorticks_off()
        ax.set_xlabel("training query groups")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
