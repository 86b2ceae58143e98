"""`pruner data` (gold records from QA data sets) and `pruner annotate` (LLM labels)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from pathlib import Path

from pruner_model.core.records import write_json, write_jsonl


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
    p.add_argument("--cache-dir", default=None)
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
    out = Path(args.output)
    jobs: list[tuple[str, list[tuple[str, Path]], int | None]] = []
    all_answers = {"train": args.train_answers == "all"}
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
    p.add_argument("--cache-dir", default=None)
    return p


# over 60 lines: the `pruner data mix` steps in order (read every source, pool, write, report)
def mix_main(argv: list[str]) -> int:
    from pruner_model.annotation.mix import SPLITS, MixSettings, build_mix, normalized
    from pruner_model.annotation.sources import LICENCES, TASK_FILES, load_source
    from pruner_model.core.records import iter_jsonl
    from tqdm.auto import tqdm

    args = _mix_parser().parse_args(argv)
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
        ex, rep = load_source(src, cache_dir=args.cache_dir)
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
    out = Path(args.output)
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


# over 60 lines: one flag a statement: the parser reads as the command's reference
def _annotate_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner annotate",
        description="Label raw groups {id, query, passages:[{id,title,text}]} (JSONL) with an LLM behind "
        "any OpenAI-compatible endpoint. Appends labeled records to --output (resumable: a re-run skips "
        "groups already there), caches every answer in OUTPUT.cache.jsonl, records failures in "
        "OUTPUT.rejects.jsonl and writes the accounting to OUTPUT.stats.json. With --compare-gold, "
        "also reports agreement with gold labeled records (or only that, without --input).",
    )
    p.add_argument(
        "--input", default=None, help="raw grouped records (JSONL), e.g. data/squad/dev.groups.jsonl"
    )
    p.add_argument("--output", required=True, help="labeled records (JSONL, appended)")
    p.add_argument("--model", default=os.environ.get("OPENAI_MODEL"), help="model name (or $OPENAI_MODEL)")
    p.add_argument("--base-url", default=None, help="endpoint (default: $OPENAI_BASE_URL)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    p.add_argument("--limit", type=int, default=None, help="only the first N groups")
    p.add_argument(
        "--shard",
        default=None,
        metavar="K/N",
        help="label only shard K of N (a stable hash of the group ids); give each shard its own --output",
    )
    p.add_argument(
        "--batch-api",
        action="store_true",
        help="send the requests as one Batch API job (files + batches endpoints) instead of online calls",
    )
    p.add_argument(
        "--batch-poll-interval", type=float, default=30.0, help="seconds between batch status checks"
    )
    p.add_argument(
        "--batch-price-factor",
        type=float,
        default=0.5,
        help="batch price as a share of --price-* (default 0.5)",
    )
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="with --batch-api: submit (or check) the batch and return; run again later to ingest it",
    )
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--max-retries", type=int, default=5)
    p.add_argument(
        "--max-connection-failures",
        type=int,
        default=3,
        help="stop (resumable, exit 3) when this many groups in a row cannot connect to the endpoint",
    )
    p.add_argument("--max-invalid", type=int, default=2, help="extra attempts after an invalid answer")
    p.add_argument(
        "--max-prompt-tokens", type=int, default=1500, help="above this estimate: one call per passage"
    )
    p.add_argument("--max-tokens", type=int, default=512, help="completion tokens per request")
    p.add_argument("--structured", choices=["auto", "json_schema", "json_object", "none"], default="auto")
    p.add_argument("--price-prompt", type=float, default=0.0, help="USD per million prompt tokens")
    p.add_argument("--price-completion", type=float, default=0.0, help="USD per million completion tokens")
    p.add_argument("--compare-gold", default=None, metavar="GOLD.jsonl", help="gold labeled records")
    return p


def annotate_main(argv: list[str] | None = None) -> int:
    import json as _json

    from pruner_model.annotation.agreement import compare_with_gold
    from pruner_model.core.records import read_jsonl

    args = _annotate_parser().parse_args(argv)
    out = Path(args.output)
    if args.input is None and args.compare_gold is None:
        raise ValueError("give --input (to annotate) and/or --compare-gold")
    summary: dict = {}
    if args.input is not None:
        code = _annotate(args, out, summary)
        if code is not None:
            return code
    if args.compare_gold is not None:
        agreement = compare_with_gold(read_jsonl(out), read_jsonl(args.compare_gold))
        summary["agreement_with_gold"] = agreement
        print(
            "agreement with gold: "
            + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in agreement.items()),
            file=sys.stderr,
        )
    write_json(out.with_name(out.name + ".stats.json"), summary)
    print(_json.dumps(summary, indent=2))
    rejected = summary.get("accounting", {}).get("groups_rejected", 0)
    if rejected:
        print(
            f"{rejected} groups rejected (reasons in {out.name}.rejects.jsonl); re-run the same command to "
            "retry them",
            file=sys.stderr,
        )
        return 1
    return 0


def _read_groups(path: str) -> list[dict]:
    """Raw groups, every line checked up front: structure, ids (strings or integers, unique, as a
    resume keys groups by them) and passage titles; each error names its line."""
    from pruner_model.core.records import canonical_id, check_unique_ids, read_jsonl

    groups = read_jsonl(path)
    ids = []
    for i, g in enumerate(groups, 1):
        where = f"{path}:{i}"
        if not isinstance(g.get("query"), str) or not isinstance(g.get("passages"), list) or "id" not in g:
            raise ValueError(f"{where}: expected {{id, query, passages}}")
        ids.append((canonical_id(g["id"], where), f"line {i}"))
        for j, p in enumerate(g["passages"]):
            if not isinstance(p, dict) or not isinstance(p.get("text"), str):
                raise ValueError(f"{where}: a passage lacks a 'text' string")
            if p.get("title") is not None and not isinstance(p["title"], str):
                raise ValueError(f"{where}: passage {j} title must be a string")
            if "id" in p:
                canonical_id(p["id"], f"{where}: passage {j}")
    check_unique_ids(ids)
    return groups


def _settings(args):
    from pruner_model.annotation.settings import AnnotatorSettings

    if not args.model:
        raise ValueError("--model is required (or set OPENAI_MODEL)")
    if args.no_wait and not args.batch_api:
        raise ValueError("--no-wait needs --batch-api")
    if args.max_connection_failures < 1:
        raise ValueError("--max-connection-failures must be >= 1")
    return AnnotatorSettings(
        model=args.model,
        base_url=args.base_url,
        api_key=os.environ.get(args.api_key_env, ""),  # unset: no key, never another variable's
        concurrency=args.concurrency,
        timeout=args.timeout,
        max_retries=args.max_retries,
        max_connection_failures=args.max_connection_failures,
        max_invalid=args.max_invalid,
        max_prompt_tokens=args.max_prompt_tokens,
        max_tokens=args.max_tokens,
        structured=args.structured,
        price_prompt=args.price_prompt,
        price_completion=args.price_completion,
    )


def _annotate(args, out: Path, summary: dict) -> int | None:
    """Label ``--input`` into ``out`` (online or through the Batch API); fills ``summary``.
    Returns an exit code to stop with, or None to go on."""
    from pruner_model.annotation.batch_api import BatchFailed, BatchLabeler
    from pruner_model.annotation.llm import Annotator, EndpointDown
    from pruner_model.core.records import parse_shard, shard_of
    from tqdm.auto import tqdm

    settings = _settings(args)
    groups = _read_groups(args.input)
    if args.limit is not None:
        groups = groups[: args.limit]
    k, n = parse_shard(args.shard)
    if n > 1:
        groups = [g for g in groups if shard_of(str(g["id"]), n) == k]
    annotator = Annotator(settings)
    annotator.open_cache(out.with_name(out.name + ".cache.jsonl"))
    rejects = out.with_name(out.name + ".rejects.jsonl")
    labeler = None
    try:
        with tqdm(
            total=len(groups), desc="annotating" + (f" shard {k}/{n}" if n > 1 else ""), unit="group"
        ) as bar:
            if args.batch_api:
                labeler = BatchLabeler(
                    annotator, args.batch_poll_interval, args.batch_price_factor, wait=not args.no_wait
                )
                acc = labeler.run(groups, out, rejects, progress=bar, inputs=[args.input])
            else:
                acc = annotator.run(groups, out, rejects, progress=bar, inputs=[args.input])
    except (EndpointDown, BatchFailed) as exc:
        write_json(out.with_name(out.name + ".stats.json"), {"accounting": annotator.acc.to_dict()})
        print(f"error: {exc}", file=sys.stderr)
        return 3
    summary["accounting"] = a = acc.to_dict()
    if labeler is not None and labeler.pending:
        print(f"batch {labeler.status}: run the same command again to collect its results", file=sys.stderr)
        write_json(out.with_name(out.name + ".stats.json"), summary)
        return 0
    print(
        f"groups: {a['groups_done']} labeled, {a['groups_skipped']} already done, {a['groups_rejected']} "
        f"rejected; requests {a['requests']} (cache hits {a['cache_hits']}, retries {a['retries']}, "
        f"invalid answers {a['invalid_answers']}); tokens {a['prompt_tokens']} prompt + "
        f"{a['completion_tokens']} completion; estimated cost ${a['estimated_cost']:.4f}",
        file=sys.stderr,
    )
    return None
