"""How well each relevance teacher ranks passages with no training: on the selection groups
(groups 300-599 of each source of ``data/qa/calibration.jsonl``), printed: the share of
questions whose gold passage the teacher ranks first and the share of mined and random passages
the gold one outscores, a passage scored by its best sentence's cosine with the query (as
``model.relevance_distill_weight`` uses it), and the spread of its scores over each group's
distractors (what ``model.relevance_distill_temperature`` divides):

    python experiments/teacher_ranking.py --teachers all-minilm-l6-v2 multilingual-e5-small
"""

from __future__ import annotations

import argparse

import numpy as np
from pruner_model.core.biencoder import passage_cosines
from pruner_model.core.records import read_jsonl
from pruner_model.evaluation.groups import load_range, records_by_source
from pruner_model.evaluation.sources import rank_passages, with_roles
from pruner_model.training.backbones import load_teacher

SPLITS = (("data/qa/calibration.jsonl", 300),)  # (file, first group of each source's permutation)


def distractor_spread(groups, scores) -> float | None:
    """The mean standard deviation of the non-gold passages' scores within a group."""
    spread = []
    for g, s in zip(groups, scores):
        others = [x for x, p in zip(s, g.passages) if p.get("role") != "gold"]
        if len(others) > 1:
            spread.append(float(np.std(others)))
    return float(np.mean(spread)) if spread else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teachers", nargs="+", default=["all-minilm-l6-v2", "multilingual-e5-small"])
    p.add_argument("--groups", type=int, default=300, help="groups per source")
    args = p.parse_args()
    splits = []
    for path, start in SPLITS:
        for src, recs in sorted(records_by_source(with_roles(read_jsonl(path))).items()):
            splits.append((src, load_range(recs, 0, start, start + args.groups)))
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    print("teacher | source | gold first | gold > mined | gold > random | distractor std")
    for name in args.teachers:
        teacher = load_teacher(name, precision="fp32")
        for src, groups in splits:
            pairs = [(g.query, p["text"]) for g in groups for p in g.passages]
            flat = passage_cosines(teacher, [q for q, _ in pairs], [t for _, t in pairs])
            sizes = np.cumsum([len(g.passages) for g in groups])[:-1]
            scores = [list(map(float, x)) for x in np.split(flat, sizes)]
            m = rank_passages(groups, scores)
            row = [
                name,
                src,
                m["gold_first"],
                m["gold_over_mined"],
                m["gold_over_random"],
                distractor_spread(groups, scores),
            ]
            print(" | ".join(row[:2] + [fmt(x) for x in row[2:]]), flush=True)


if __name__ == "__main__":
    main()
