"""`pruner data` (gold records from QA data sets) and `pruner annotate` (LLM labels)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from pruner_model.records import write_json, write_jsonl


def _data_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner data",
        description="Build labeled records from SQuAD-format QA data. 'squad' reads SQuAD v1.1 dev and "
        "SQuADShifts new_wiki (train) and nyt (dev) from the bigbench==1.0.0 sdist (downloaded once "
        "with pip, cached in $PRUNER_CACHE or ~/.cache/pruner); --file adds any SQuAD-format file. "
        "Writes OUT/<split>.jsonl (labeled records), OUT/<split>.groups.jsonl (raw groups for "
        "'pruner annotate') and OUT/report.json. reddit and amazon are held out and refused.",
    )
    p.add_argument("source", choices=["squad"], help="the data family (SQuAD format)")
    p.add_argument("--output", default="data/squad", help="output folder (default: data/squad)")
    p.add_argument("--train-splits", nargs="*", default=["squaddev", "new_wiki"])
    p.add_argument("--dev-splits", nargs="*", default=["nyt"])
    p.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH[:NAME]",
        help="a SQuAD-format JSON file, written as split NAME (default: the file's stem)",
    )
    p.add_argument("--passages-per-group", type=int, default=5)
    p.add_argument(
        "--hard-distractors", type=int, default=2, help="distractors from the gold paragraph's article"
    )
    p.add_argument("--no-gold-share", type=float, default=0.1, help="share of groups with no gold paragraph")
    p.add_argument("--max-train-questions", type=int, default=None)
    p.add_argument("--max-dev-questions", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default=None)
    return p


def data_main(argv: list[str] | None = None) -> int:
    from .squad import build_groups, fetch_squad_split, load_squad

    args = _data_parser().parse_args(argv)
    if not 0 <= args.no_gold_share <= 1:
        raise ValueError("--no-gold-share must be in [0, 1]")
    if args.passages_per_group < 1:
        raise ValueError("--passages-per-group must be >= 1")
    out = Path(args.output)
    jobs: list[tuple[str, list[tuple[str, Path]], int | None]] = []
    if args.train_splits:
        jobs.append(
            (
                "train",
                [(s, fetch_squad_split(s, args.cache_dir)) for s in args.train_splits],
                args.max_train_questions,
            )
        )
    if args.dev_splits:
        jobs.append(
            (
                "dev",
                [(s, fetch_squad_split(s, args.cache_dir)) for s in args.dev_splits],
                args.max_dev_questions,
            )
        )
    for spec in args.file:
        path, _, name = spec.partition(":")
        path = Path(path)
        jobs.append((name or path.stem, [(name or path.stem, path)], None))
    report = {}
    for name, sources, max_q in jobs:
        records, groups = [], []
        for split, path in sources:
            paragraphs, questions = load_squad(path, split)
            r, g = build_groups(
                paragraphs,
                questions,
                args.passages_per_group,
                args.hard_distractors,
                args.no_gold_share,
                args.seed,
                None,
            )
            records += r
            groups += g
        if max_q is not None:  # keep whole groups
            keep = {g["id"] for g in groups[:max_q]}
            groups = groups[:max_q]
            records = [r for r in records if r["id"].split("/", 1)[0] in keep]
        write_jsonl(out / f"{name}.jsonl", records)
        write_jsonl(out / f"{name}.groups.jsonl", groups)
        kinds = Counter("gold" if r["relevant_spans"] else "negative" for r in records)
        gold_groups = {r["id"].split("/", 1)[0] for r in records if r["relevant_spans"]}
        no_gold = len(groups) - len(gold_groups)
        report[name] = {
            "splits": [s for s, _ in sources],
            "groups": len(groups),
            "records": len(records),
            "positives": kinds["gold"],
            "negatives": kinds["negative"],
            "groups_without_gold": no_gold,
        }
        print(
            f"{name}: {len(groups)} groups, {len(records)} records ({kinds['gold']} gold, "
            f"{kinds['negative']} negatives, {no_gold} groups without gold) -> {out / (name + '.jsonl')}",
            file=sys.stderr,
        )
    write_json(out / "report.json", report)
    return 0


def annotate_main(argv: list[str] | None = None) -> int:
    from .llm_cli import annotate_main as impl

    return impl(argv)
