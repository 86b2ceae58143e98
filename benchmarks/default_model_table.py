"""The shipped default model's held-back numbers as a Markdown table (README, docs/results.md).

Reads ``evaluation.json`` of the default model folder (written by ``scripts/build_default_model.sh``
from ``pruner evaluate --by-source --max-groups 300`` on ``data/qa/dev.jsonl`` and
``data/qa/heldout.jsonl``); nothing is scored again. ``--model DIR`` reads another shipped folder.

    python3 benchmarks/default_model_table.py [--model DIR] [--full]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TEXT = {
    "squad": "Wikipedia",
    "new_wiki": "Wikipedia, newer articles",
    "tydiqa_en": "Wikipedia, information-seeking questions",
    "selqa": "Wikipedia sections",
    "tweetqa": "tweets",
    "covidqa": "biomedical papers (never trained)",
    "friendsqa": "TV dialogue (never trained)",
    "policyqa": "privacy policies (never trained)",
}


def table(rows: dict, full: bool = False) -> str:
    head = "| text | set | kept [95% interval] | compression | compression at 95% kept (swept) |"
    extra = " answer-less groups: tokens kept | gold passage first |" if full else ""
    lines = [head + extra, "|---|---|---|---|---|" + ("---|---|" if full else "")]
    for name, r in rows.items():
        if r["evidence_preserved"] is None:
            continue  # passage-level labels: no answer sentences to keep
        lo, hi = r["interval"]
        line = (
            f"| {TEXT.get(name, name)} | {name} ({r['split']}) | {r['evidence_preserved']:.3f} "
            f"[{lo:.3f}, {hi:.3f}] | {r['compression']:.3f} | {r['compression_at_0.95']:.3f} |"
        )
        if full:
            line += f" {r['answerless_tokens_kept']:.3f} | {r['gold_ranked_first']:.3f} |"
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    from pruner_model import DEFAULT_MODEL

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    p.add_argument("--full", action="store_true", help="also answer-less groups' tokens and passage ranking")
    args = p.parse_args()
    rows = json.loads((Path(args.model) / "evaluation.json").read_text())["sets"]
    print(table(rows, args.full))


if __name__ == "__main__":
    main()
