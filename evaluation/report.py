"""The evaluation report as people read it: Markdown tables and the compression-vs-evidence plot."""

from __future__ import annotations

from pathlib import Path

from pruner_model.core.records import atomic_open

TARGETS = (0.90, 0.95, 0.97, 0.99)  # the evidence levels every table reports


_VERDICTS = {
    "met": "the promise holds on these queries.",
    "within chance": "under the promise but inside the interval: too few queries to tell a miss from luck.",
    "missed": "the whole interval lies under the promise: the threshold does not keep it on these "
    "queries (`--write-threshold` writes the recommended one into the checkpoint).",
}


def _default_text(op: dict) -> str:
    """The checkpoint's default threshold as the report names it."""
    if op.get("checkpoint_default") == "per-request":
        return f"per-request, median {op['checkpoint_threshold']:.4f}"
    return f"{op['checkpoint_threshold']:.4f}"


def _promise_lines(op: dict) -> list[str]:
    at = op["at_checkpoint_threshold"]
    p = at.get("promise")
    if p is None:
        return []
    lo, hi = p["interval"]
    where = f"At {op['checkpoint_threshold']:.4f}"
    if op.get("checkpoint_default") == "per-request":
        one = op["at_one_threshold"]
        where = (
            f"At its per-request thresholds (what `prune()` applies with no settings; median "
            f"{op['checkpoint_threshold']:.4f}; at its one threshold {one['threshold']:.4f} it keeps "
            f"{one['evidence_preserved']:.3f} at compression {one['compression']:.3f})"
        )
    return [
        "",
        "## The checkpoint's own threshold\n",
        f"{where} (promised evidence {p['target']}): kept {p['kept']} of "
        f"{p['queries']} queries with evidence ({p['share']:.3f}; {p['level']:.0%} interval "
        f"{lo:.3f}–{hi:.3f}), compression {at['compression']:.3f}. **{p['verdict']}**: "
        + _VERDICTS[p["verdict"]],
    ]


def _rule_text(report: dict) -> str:
    """The score rule the recommended threshold is on (relative floor, relevance weighting)."""
    out = ""
    if report.get("relative_floor") is not None:
        out += f"; on scores relative to each query's best sentence, floor {report['relative_floor']}"
    if report.get("relevance_exponent"):
        out += f"; sentence scores times passage relevance^{report['relevance_exponent']}"
        if report.get("relevance_contrast"):
            out += (
                f", relevance set against the query's best passage (contrast {report['relevance_contrast']})"
            )
    return out


def write_markdown(report: dict, path: Path) -> None:
    lines = [
        "# Pruning evaluation\n",
        f"{report['groups']} queries ({report['groups_with_evidence']} with evidence), "
        f"{report['passages']} passages.\n",
        "## Best token compression at each evidence-preserved level\n",
        "| system | " + " | ".join(f"evidence ≥ {t:.2f}" for t in TARGETS) + " |",
        "|---|" + "---|" * len(TARGETS),
    ]
    for name, s in report["systems"].items():
        cells = []
        for t in TARGETS:
            b = s["best_compression_at"][f"{t:.2f}"]
            cells.append("—" if b is None else f"{b['compression']:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    op = report["operating_point"]
    lines += [
        "",
        f"## Operating point (target evidence {report['target_evidence']}"
        + (f", with confidence {report['confidence']}" if report.get("confidence") is not None else "")
        + ")\n",
        f"Recommended threshold **{report['recommended_threshold']:.4f}** "
        f"(checkpoint default {_default_text(op)}{_rule_text(report)}), "
        "measured through the full pipeline:\n",
        "| metric | value |",
        "|---|---|",
    ]
    for k in (
        "evidence_preserved",
        "relevant_sentences_kept",
        "compression",
        "word_compression",
        "precision",
        "recall",
        "f1",
        "f2",
        "negative_tokens_kept",
        "latency_ms_mean",
    ):
        lines.append(f"| {k} | {op[k]:.3f} |")
    lines += _promise_lines(op)
    if report.get("budgets"):
        lines += ["", "## Token budgets\n", "| budget | evidence preserved | compression |", "|---|---|---|"]
        lines += [
            f"| {b['token_budget']} | {b['evidence_preserved']:.3f} | {b['compression']:.3f} |"
            for b in report["budgets"]
        ]
    with atomic_open(path) as fh:
        fh.write("\n".join(lines) + "\n")


def plot_curves(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5), dpi=120)
    for name, s in report["systems"].items():
        pts = sorted((p["compression"], p["evidence_preserved"]) for p in s["curve"])
        xs, ys = zip(*pts)
        style = "o" if name == "keep_all" else "-"
        ax.plot(xs, ys, style, label=name, lw=2 if name == "pruner" else 1.2)
    op = report["operating_point"]
    ax.plot(
        [op["compression"]],
        [op["evidence_preserved"]],
        "k*",
        ms=14,
        label=f"operating point (t={report['recommended_threshold']:.3f})",
    )
    ax.axhline(report["target_evidence"], color="grey", ls=":", lw=1)
    ax.set_xlabel("token compression (1 − kept / total)")
    ax.set_ylabel("evidence preserved (queries with every relevant sentence kept)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title(f"Compression vs evidence ({report['groups']} queries)")
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:  # no half-written figure if plotting fails
        fig.savefig(fh, format="png")
    plt.close(fig)
