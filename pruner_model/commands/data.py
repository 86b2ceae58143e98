"""`pruner data`: labeled records and retriever-style groups from QA data sets: `qa` (the public QA
files in their published formats), `squad` (a SQuAD-format file of your own)."""

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


def _data_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner data",
        description="Build labeled records from QA data. 'qa' reads the public QA data sets in their "
        "published formats from a folder you name ('pruner data qa --help'); 'squad' reads SQuAD-format "
        "files of your own (--file, one split each: each question's paragraph and distractors from the "
        "same and other articles). Writes OUT/<split>.jsonl (labeled records), OUT/<split>.groups.jsonl "
        "(raw groups for 'pruner annotate') and OUT/report.json.",
    )
    p.add_argument(
        "source",
        choices=["qa", "squad"],
        help="qa: the public QA files as one retriever-style pool; squad: SQuAD-format files of your own",
    )
    p.add_argument("--output", default="data/squad", help="output folder (default: data/squad)")
    p.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH[:NAME]",
        help="a SQuAD-format JSON file, written as split NAME (default: the file's stem); "
        "a split named 'train' gets --mined-distractors and --train-answers",
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
    p.add_argument("--seed", type=int, default=0)
    return p


# over 60 lines: the `pruner data` steps in order (read, convert, write, report); each is a call, the length is their arguments
def data_main(argv: list[str] | None = None) -> int:
    from pruner_model.annotation.squad import build_groups, load_squad

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["qa"]:
        return qa_main(argv[1:])
    args = _data_parser().parse_args(argv)
    if not 0 <= args.no_gold_share <= 1:
        raise ValueError("--no-gold-share must be in [0, 1]")
    if args.passages_per_group < 1:
        raise ValueError("--passages-per-group must be >= 1")
    if args.mined_distractors < 0:
        raise ValueError("--mined-distractors must be >= 0")
    if not args.file:
        raise ValueError(
            "pruner data squad reads SQuAD-format files of your own: give --file PATH[:NAME]; "
            "the public QA data sets: pruner data qa --from DIR"
        )
    out = output_folder(args.output)
    jobs: list[tuple[str, Path]] = []
    all_answers = {"train": args.train_answers == "all"}
    for spec in args.file:
        path, _, name = spec.partition(":")
        path = Path(path)
        name = name or path.stem
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
            raise ValueError(
                f"--file {spec}: split name {name!r} must be letters, digits, '_', '.', '-' (a file name in --output)"
            )
        jobs.append((name, path))
    report = {}
    for name, path in jobs:
        paragraphs, questions = load_squad(path, name)
        records, groups = build_groups(
            paragraphs,
            questions,
            args.passages_per_group,
            args.hard_distractors,
            args.no_gold_share,
            args.seed,
            all_answers=all_answers.get(name, False),
            mined_distractors=args.mined_distractors if name == "train" else 0,
        )
        write_jsonl(out / f"{name}.jsonl", records)
        write_jsonl(out / f"{name}.groups.jsonl", groups)
        kinds = Counter("gold" if r["relevant_spans"] else "negative" for r in records)
        gold_groups = {r["id"].split("/", 1)[0] for r in records if r["relevant_spans"]}
        no_gold = len(groups) - len(gold_groups)
        report[name] = {
            "splits": [name],
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


def _qa_parser() -> argparse.ArgumentParser:
    from pruner_model.annotation.public_qa import ENV, HELDOUT_SETS, SETS, TRAIN_SETS

    p = argparse.ArgumentParser(
        prog="pruner data qa",
        description="Build retriever-style query groups from public QA data sets in their published "
        f"formats (a folder laid out like the public QA pack: --from DIR or ${ENV}; docs/data.md). "
        "Documents are cut into chunks, pooled, and split by document into train / calibration / dev; "
        "the --heldout sets go whole to 'heldout' (never trained or calibrated on). Writes "
        "OUT/<split>.jsonl, OUT/<split>.groups.jsonl and OUT/report.json (per set: questions kept, "
        "answers not found, licence). Every file is checked against its published sha256 first.",
    )
    p.add_argument("--from", dest="folder", default=None, help=f"the QA data folder (default: ${ENV})")
    p.add_argument("--output", default="data/qa", help="output folder (default: data/qa)")
    p.add_argument(
        "--sets",
        default=",".join(TRAIN_SETS),
        help=f"comma list of data sets split into train / calibration / dev, of {', '.join(SETS)} "
        "(default: the English sets a distributed model may train on)",
    )
    p.add_argument(
        "--heldout",
        default=",".join(HELDOUT_SETS),
        help="comma list of whole data sets for the heldout split only (default: dialogue, papers, "
        "privacy policies); '' for none",
    )
    p.add_argument("--passages-per-group", type=int, default=5)
    p.add_argument("--same-doc", type=int, default=1, help="other chunks of the question's document")
    p.add_argument(
        "--mined",
        type=int,
        default=2,
        help="TF-IDF-retrieved chunks without the answer, in calibration, dev and heldout groups",
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
    p.add_argument("--max-train-questions", type=int, default=6000, help="per set (0 = all)")
    p.add_argument(
        "--max-dev-questions", type=int, default=600, help="per set, in calibration, dev and heldout each"
    )
    p.add_argument("--seed", type=int, default=0)
    return p


def _names(text: str, option: str) -> list[str]:
    from pruner_model.annotation.public_qa import SETS

    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in SETS]
    if unknown:
        raise ValueError(f"{option}: unknown data set {unknown[0]!r}; choose from {', '.join(SETS)}")
    return names


def _read_sets(names: list[str], folder: Path) -> tuple[list, dict]:
    """Every named set's examples, and per set what was read (counts, licence, files)."""
    from tqdm.auto import tqdm

    from pruner_model.annotation.public_qa import SETS, load_set

    examples, report = [], {}
    for name in tqdm(names, desc="reading", unit="set"):
        ex, rep = load_set(name, folder)
        examples += ex
        qa = SETS[name]
        report[name] = rep.to_dict() | {
            "licence": qa.licence,
            "text": qa.text,
            "language": qa.language,
            "distributable": qa.distributable,
            "files": list(qa.files),
        }
        tqdm.write(
            f"{name}: {rep.kept}/{rep.questions} questions kept, answer not found for {rep.unmapped} "
            f"({rep.mapping_failure_rate:.1%}), skipped {sum(rep.skipped.values())} {rep.skipped or ''}",
            file=sys.stderr,
        )
    return examples, report


def _say_dropped(stats: dict) -> None:
    """One stderr line for each kind of held-out question the build dropped."""
    why = {
        "heldout_shared": "their document is also in a training set",
        "heldout_translated": "they translate a SQuAD article that is trained or calibrated on",
    }
    for key, reason in why.items():
        if stats.get(key):
            print(f"heldout: {stats[key]} questions dropped: {reason}", file=sys.stderr)


def qa_main(argv: list[str]) -> int:
    """`pruner data qa`: read every set, pool and split them, write the records and the report."""
    from tqdm.auto import tqdm

    from pruner_model.annotation.mix import SPLITS, MixSettings, build_mix
    from pruner_model.annotation.public_qa import pack_folder

    args = _qa_parser().parse_args(argv)
    folder = pack_folder(args.folder)
    out = output_folder(args.output)  # before minutes of building: a file there is an error now
    sets, heldout = _names(args.sets, "--sets"), _names(args.heldout, "--heldout")
    if not sets and not heldout:
        raise ValueError("--sets and --heldout name no data set")
    if both := sorted(set(sets) & set(heldout)):
        raise ValueError(f"{both[0]} is in both --sets and --heldout: a held-out set is never trained on")
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
        max_questions={
            "train": args.max_train_questions or None,
            "calibration": dev_cap,
            "dev": dev_cap,
            "heldout": dev_cap,
        },
        seed=args.seed,
        heldout_sources=frozenset(heldout),
    )
    examples, read = _read_sets([*sets, *heldout], folder)
    report = {"sets": read, "settings": vars(args) | {"sets": sets, "heldout": heldout}}
    with tqdm(desc="building groups", unit="query") as bar:
        records, groups, stats = build_mix(examples, settings, progress=bar)
    for split in SPLITS:
        write_jsonl(out / f"{split}.jsonl", records[split])
        write_jsonl(out / f"{split}.groups.jsonl", groups[split])
        per = Counter(g["id"].split(":", 1)[0] for g in groups[split])  # ids are "<set>:<id>"
        report[split] = {"groups": len(groups[split]), "records": len(records[split]), "per_set": dict(per)}
        print(
            f"{split}: {len(groups[split])} groups, {len(records[split])} records "
            f"({', '.join(f'{k} {v}' for k, v in sorted(per.items()))}) -> {out / (split + '.jsonl')}",
            file=sys.stderr,
        )
    _say_dropped(stats)
    report["pool"] = stats
    write_json(out / "report.json", report)
    return 0
