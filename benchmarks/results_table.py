"""One table for docs/results.md: each checkpoint on every source's held-back split, on nyt and on
nyt's shifted slices, at 95% / 97% of answers kept and at its own threshold.

    python3 benchmarks/results_table.py --model quickstart=runs/quickstart reference=runs/reference \
        --output reports/results-table
    python3 benchmarks/results_table.py --render reports/results-table/results.json  # tables again

Groups: `data/qa/dev.jsonl`, groups 0-599 of each source's permutation (documents no config trains
or calibrates on); nyt (`data/qa/dev.jsonl`) groups 6000-6399, and the shifted slices built from
them (noisy, mined); low_overlap takes the low-overlap questions of groups 6000-7999. Writes
OUTPUT/results.json and OUTPUT/results.md and prints both tables: the operating points (the
checkpoint's threshold, and its named operating point for the row's source: nyt's is the dev data's,
``squad``), and where compression goes (each passage role's tokens kept at 95% of answers, the relevance head's ranking).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SLICES = ("noisy", "mined", "low_overlap")


def _pct(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def measure(
    model: str,
    mix_dev: str,
    nyt_dev: str,
    mix_groups: int,
    nyt_start: int,
    nyt_groups: int,
    low_overlap_groups: int,
    dtype: str,
) -> dict:
    """``{row name: source_metrics}`` for one checkpoint."""
    from pruner_model.core.records import read_jsonl
    from pruner_model.evaluation.groups import group_of, range_ids, source_of
    from pruner_model.evaluation.shifts import build_shift
    from pruner_model.evaluation.sources import evaluate_sources

    from pruner_model import ContextPruner

    pruner = ContextPruner.from_pretrained(model, dtype=dtype)
    rows: dict = {}
    nyt = read_jsonl(nyt_dev)
    point = source_of(nyt[0])  # the named operating point of every nyt row: the dev data's
    rows["nyt"] = next(
        iter(evaluate_sources(pruner, nyt, nyt_groups, nyt_start, operating_point=point).values())
    )
    for name in SLICES:
        n = low_overlap_groups if name == "low_overlap" else nyt_groups
        keep = range_ids((group_of(r) for r in nyt), 0, nyt_start, nyt_start + n)
        shifted = build_shift(name, nyt, 0, keep)
        rows[f"nyt {name}"] = next(
            iter(evaluate_sources(pruner, shifted, None, 0, operating_point=point).values())
        )
    for src, m in evaluate_sources(pruner, read_jsonl(mix_dev), mix_groups, 0).items():
        rows[src] = m
    return rows


def markdown(results: dict) -> str:
    from pruner_model.evaluation.sources import promise_text

    lines = [
        "| config | split | groups | comp. at 95% kept | at 97% | best F1 | kept at its threshold "
        "[95% interval] verdict | comp. there | kept at its source's operating point | comp. there "
        "| random passages' tokens kept at 95% | gold first | gold > random |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config, rows in results.items():
        for split, m in rows.items():
            at, named = m.get("at_checkpoint_threshold"), m.get("at_operating_point")
            r = m["ranking"]
            random = (m.get("tokens_kept_at_0.95") or {}).get("random")
            lines.append(
                f"| {config} | {split} | {m['groups']} | {_pct(m.get('compression_at_0.95'))} | "
                f"{_pct(m.get('compression_at_0.97'))} | {_pct(m.get('best_f1'))} | {promise_text(at)} | "
                f"{_pct(at['compression']) if at else '–'} | {promise_text(named) if named else '–'} | "
                f"{_pct(named['compression']) if named else '–'} | {_pct(random)} | "
                f"{_pct(r['gold_first'])} | {_pct(r['gold_over_random'])} |"
            )
    return "\n".join(lines) + "\n"


def roles_markdown(results: dict) -> str:
    """Where compression goes: the share of each passage role's tokens kept at 95% of answers, and
    how the relevance head orders the gold passage against the others."""
    roles = ("gold", "same_doc", "mined", "random", "answerless")
    lines = [
        "| config | split | gold | same document | mined | random | groups with no answer | gold first "
        "| gold > mined | gold > random |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    share = lambda x: "–" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    for config, rows in results.items():
        for split, m in rows.items():
            kept = m.get("tokens_kept_at_0.95") or {}
            r = m["ranking"]
            cells = [share(kept.get(k)) for k in roles]
            cells += [share(r["gold_first"]), share(r["gold_over_mined"]), share(r["gold_over_random"])]
            lines.append(f"| {config} | {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", nargs="+", metavar="NAME=PATH")
    p.add_argument("--mix-dev", default="data/qa/dev.jsonl")
    p.add_argument("--nyt-dev", default="data/qa/dev.jsonl")
    p.add_argument("--mix-groups", type=int, default=600)
    p.add_argument("--nyt-start", type=int, default=6000)
    p.add_argument("--nyt-groups", type=int, default=400)
    p.add_argument("--low-overlap-groups", type=int, default=2000)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--output", default="reports/results-table")
    p.add_argument(
        "--render", metavar="RESULTS_JSON", help="print the tables of an earlier run's results.json"
    )
    args = p.parse_args()
    if args.render:
        try:
            results = json.loads(Path(args.render).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            p.error(f"--render {args.render}: {exc}")
        print(markdown(results) + "\n" + roles_markdown(results))
        return
    if not args.model:
        p.error("--model NAME=PATH is required (or --render RESULTS_JSON)")
    results = {}
    for spec in args.model:
        name, _, path = spec.partition("=")
        results[name] = measure(
            path or name,
            args.mix_dev,
            args.nyt_dev,
            args.mix_groups,
            args.nyt_start,
            args.nyt_groups,
            args.low_overlap_groups,
            args.dtype,
        )
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    text = markdown(results) + "\n" + roles_markdown(results)
    (out / "results.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
