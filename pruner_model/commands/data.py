"""`pruner data`: labeled records and retriever-style groups from QA data sets (`squad`, `mix`)."""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

from pruner_model.core.records import write_json, write_jsonl


def output_folder(path: str) -> Path:
    """``--output``: a folder (made when missing); an existing file there is a one-line error."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--output {out} is a file: give a folder (the records are written as files in it)")
    return out


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    """Where the bigbench sdist and what is extracted from it are kept."""
    p.add_argument(
        "--sdist",
        default=None,
        help="a copy of bigbench-1.0.0.tar.gz, or a checkout of the BIG-bench repository, to read instead "
        "of downloading the sdist (default: $PRUNER_BIGBENCH_SDIST, else the cached one, else pip download)",
    )
    p.add_argument("--cache-dir", default=None, help="default: $PRUNER_CACHE, else ~/.cache/pruner")


def _data_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner data",
        description="Build labeled records from SQuAD-format QA data. 'squad' reads SQuAD v1.1 dev and "
        "SQuADShifts new_wiki (train) and nyt (dev) from the bigbench==1.0.0 sdist (downloaded once "
        "with pip, cached in $PRUNER_CACHE or ~/.cache/pruner); --file adds any SQuAD-format file. "
        "Writes OUT/<split>.jsonl (labeled records), OUT/<split>.groups.jsonl (raw groups for "
        "'pruner annotate') and OUT/report.json. reddit and amazon are held out and refused.",
    )
    p.add_argument(
        "source",
        choices=["squad", "mix"],
        help="squad: the SQuAD-format family; mix: every other QA source of the sdist in one pool "
        "('pruner data mix --help')",
    )
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
    p.add_argument(
        "--mined-distractors",
        type=int,
        default=0,
        help="train groups: this many distractors are the TF-IDF-nearest paragraphs of other articles "
        "(retriever-style) instead of random ones; dev groups are left as they are",
    )
    p.add_argument("--no-gold-share", type=float, default=0.1, help="share of groups with no gold paragraph")
    p.add_argument(
        "--train-answers",
        choices=["all", "first"],
        default="all",
        help="train labels: sentences of every annotator's answer (default) or of the first only; "
        "dev and --file splits always label the first (reference) answer's sentences",
    )
    p.add_argument("--max-train-questions", type=int, default=None)
    p.add_argument("--max-dev-questions", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    add_source_arguments(p)
    return p


# over 60 lines: the `pruner data` steps in order (read, convert, write, report); each is a call, the length is their arguments
def data_main(argv: list[str] | None = None) -> int:
    from pruner_model.annotation.squad import build_groups, fetch_squad_split, load_squad

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["mix"]:
        return mix_main(argv[1:])
    args = _data_parser().parse_args(argv)
    if not 0 <= args.no_gold_share <= 1:
        raise ValueError("--no-gold-share must be in [0, 1]")
    if args.passages_per_group < 1:
        raise ValueError("--passages-per-group must be >= 1")
    if args.mined_distractors < 0:
        raise ValueError("--mined-distractors must be >= 0")
    out = output_folder(args.output)
    jobs: list[tuple[str, list[tuple[str, Path]], int | None]] = []
    all_answers = {"train": args.train_answers == "all"}
    if args.train_splits:
        jobs.append(
            (
                "train",
                [(s, fetch_squad_split(s, args.cache_dir, args.sdist)) for s in args.train_splits],
                args.max_train_questions,
            )
        )
    if args.dev_splits:
        jobs.append(
            (
                "dev",
                [(s, fetch_squad_split(s, args.cache_dir, args.sdist)) for s in args.dev_splits],
                args.max_dev_questions,
            )
        )
    for spec in args.file:
        path, _, name = spec.partition(":")
        path = Path(path)
        name = name or path.stem
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
            raise ValueError(
                f"--file {spec}: split name {name!r} must be letters, digits, '_', '.', '-' (a file name in --output)"
            )
        jobs.append((name, [(name, path)], None))
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
                all_answers=all_answers.get(name, False),
                mined_distractors=args.mined_distractors if name == "train" else 0,
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
            "labels": "every answer's sentences" if all_answers.get(name) else "the first answer's sentences",
        }
        print(
            f"{name}: {len(groups)} groups, {len(records)} records ({kinds['gold']} gold, "
            f"{kinds['negative']} negatives, {no_gold} groups without gold) -> {out / (name + '.jsonl')}",
            file=sys.stderr,
        )
    write_json(out / "report.json", report)
    return 0


def _mix_parser() -> argparse.ArgumentParser:
    from pruner_model.annotation.sources import ENGLISH_SOURCES, TASK_FILES

    p = argparse.ArgumentParser(
        prog="pruner data mix",
        description="Build retriever-style query groups from the other QA sources of the bigbench==1.0.0 "
        "sdist (search queries, news and fiction, disfluent questions, blogs; docs/data.md): documents "
        "cut into chunks, one pool across sources, split by document into train / calibration / dev. "
        "Writes OUT/<split>.jsonl, OUT/<split>.groups.jsonl and OUT/report.json (per source: questions "
        "kept, answer-mapping failures, licence). CoQA is reserved for outside evaluation and never read.",
    )
    p.add_argument("--output", default="data/mix", help="output folder (default: data/mix)")
    p.add_argument(
        "--sources",
        default=",".join(ENGLISH_SOURCES),
        help=f"comma list of sources, of {', '.join(TASK_FILES)} (default: the English ones; the "
        "multilingual recipe adds hindi,parsinlu: docs/multilingual.md)",
    )
    p.add_argument("--passages-per-group", type=int, default=5)
    p.add_argument("--same-doc", type=int, default=1, help="other chunks of the question's document")
    p.add_argument(
        "--mined",
        type=int,
        default=2,
        help="TF-IDF-retrieved chunks without the answer, in calibration and dev groups",
    )
    p.add_argument(
        "--train-mined",
        type=int,
        default=3,
        help="the same in training groups: hard negatives teach ranking (docs/data.md)",
    )
    p.add_argument(
        "--no-gold-share", type=float, default=0.15, help="share of answerable questions without their gold"
    )
    p.add_argument("--chunk-words", type=int, default=150, help="at most this many words a passage")
    p.add_argument("--max-train-questions", type=int, default=6000, help="per source (0 = all)")
    p.add_argument("--max-dev-questions", type=int, default=600, help="per source, calibration and dev each")
    p.add_argument(
        "--squad-train",
        default="data/squad/train.jsonl",
        help="SQuAD training records: documents they hold stay in train (skipped when missing)",
    )
    p.add_argument("--seed", type=int, default=0)
    add_source_arguments(p)
    return p


# over 60 lines: the `pruner data mix` steps in order (read every source, pool, write, report)
def mix_main(argv: list[str]) -> int:
    from tqdm.auto import tqdm

    from pruner_model.annotation.mix import SPLITS, MixSettings, build_mix, normalized
    from pruner_model.annotation.sources import LICENCES, TASK_FILES, load_source
    from pruner_model.core.records import iter_jsonl

    args = _mix_parser().parse_args(argv)
    out = output_folder(args.output)  # before minutes of building: a file there is an error now
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    unknown = [s for s in sources if s not in TASK_FILES]
    if unknown or not sources:
        raise ValueError(
            f"unknown source {unknown[0] if unknown else ''!r}; choose from {', '.join(TASK_FILES)}"
        )
    if args.max_train_questions < 0 or args.max_dev_questions < 0:
        raise ValueError("--max-train-questions and --max-dev-questions must be >= 0")
    dev_cap = args.max_dev_questions or None
    settings = MixSettings(
        args.passages_per_group,
        args.same_doc,
        args.mined,
        args.train_mined,
        args.no_gold_share,
        args.chunk_words,
        max_questions={"train": args.max_train_questions or None, "calibration": dev_cap, "dev": dev_cap},
        seed=args.seed,
    )
    examples, report = [], {"sources": {}, "settings": vars(args) | {"sources": sources}}
    for src in sources:
        ex, rep = load_source(src, cache_dir=args.cache_dir, sdist=args.sdist)
        examples += ex
        report["sources"][src] = rep.to_dict() | {"licence": LICENCES[src]}
        print(
            f"{src}: {rep.kept}/{rep.questions} questions kept, answer not found for {rep.unmapped} "
            f"({rep.mapping_failure_rate:.1%}), skipped {sum(rep.skipped.values())} {rep.skipped or ''}",
            file=sys.stderr,
        )
    train_texts = set()
    if Path(args.squad_train).is_file():
        train_texts = {normalized(r["context"]) for r in iter_jsonl(args.squad_train)}
    with tqdm(desc="building groups", unit="query") as bar:
        records, groups, stats = build_mix(examples, settings, train_texts, progress=bar)
    for split in SPLITS:
        write_jsonl(out / f"{split}.jsonl", records[split])
        write_jsonl(out / f"{split}.groups.jsonl", groups[split])
        per = Counter(g["id"].split(":", 1)[0] for g in groups[split])  # ids are "<source>:<n>"
        report[split] = {
            "groups": len(groups[split]),
            "records": len(records[split]),
            "per_source": dict(per),
        }
        print(
            f"{split}: {len(groups[split])} groups, {len(records[split])} records "
            f"({', '.join(f'{k} {v}' for k, v in sorted(per.items()))}) -> {out / (split + '.jsonl')}",
            file=sys.stderr,
        )
    report["pool"] = stats
    write_json(out / "report.json", report)
    return 0
