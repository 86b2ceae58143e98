"""Count training groups whose negative passages may hold the answer (possible false negatives):

* a negative that contains one of the group's evidence sentences (6 words or more) verbatim;
* with SQuAD-style records (``meta.answers``: character spans of the gold answers), a negative that
  contains a gold answer string of 2 words or more.

    python experiments/false_negatives.py data/qa/train.jsonl data/qa/calibration.jsonl

Prints the counts per source and per role of the negative (``meta.role`` or, for SQuAD, whether it
was a mined "hard" distractor).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict


def norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def role(rec: dict) -> str:
    meta = rec.get("meta") or {}
    return meta.get("role") or ("mined" if meta.get("hard") else "other")


def audit(path: str, stats: dict) -> None:
    groups: dict[str, list[dict]] = defaultdict(list)
    for line in open(path, encoding="utf-8"):
        r = json.loads(line)
        groups[r["id"].split("/")[0]].append(r)
    for recs in groups.values():
        c = stats[recs[0]["source"]]
        c["groups"] += 1
        evidence = {norm(r["context"][s:e]) for r in recs for s, e in r["relevant_spans"]}
        evidence = {e for e in evidence if len(e.split()) >= 6}
        answers = {
            norm(r["context"][s:e]) for r in recs for s, e in (r.get("meta") or {}).get("answers") or []
        }
        answers = {a for a in answers if len(a.split()) >= 2}
        c["groups with evidence"] += bool(evidence)
        hit = False
        for r in recs:
            if r["relevant_spans"]:
                continue
            text = norm(r["context"])
            if any(e in text for e in evidence):
                c[f"negatives holding an evidence sentence ({role(r)})"] += 1
                hit = True
            elif any(a in text for a in answers):
                c[f"negatives holding an answer string ({role(r)})"] += 1
                hit = True
        c["groups with such a negative"] += hit


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="labeled records (JSONL), e.g. data/qa/train.jsonl")
    stats: dict[str, Counter] = defaultdict(Counter)
    for path in p.parse_args().files:
        audit(path, stats)
    for source, c in sorted(stats.items()):
        share = c["groups with such a negative"] / max(1, c["groups with evidence"])
        print(f"{source}: {dict(c)} -> {share:.1%} of groups with evidence")


if __name__ == "__main__":
    main()
