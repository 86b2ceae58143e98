"""`pruner annotate`: label (query, passages) groups with an LLM behind an OpenAI-compatible endpoint."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pruner_model.commands.common import add_endpoint_arguments, add_request_arguments, endpoint_settings
from pruner_model.core.records import write_json


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
    add_endpoint_arguments(p)
    p.add_argument("--limit", type=int, default=None, help="only the first N groups")
    p.add_argument(
        "--shard",
        default=None,
        metavar="K/N",
        help="label only shard K of N (a stable hash of the group ids); give each shard its own --output",
    )
    _add_batch_arguments(p)
    add_request_arguments(p)
    p.add_argument("--compare-gold", default=None, metavar="GOLD.jsonl", help="gold labeled records")
    return p


def _add_batch_arguments(p: argparse.ArgumentParser) -> None:
    """The Batch API path (``--batch-api``)."""
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
    if args.no_wait and not args.batch_api:
        raise ValueError("--no-wait needs --batch-api")
    return endpoint_settings(args, args.model)


def _annotate(args, out: Path, summary: dict) -> int | None:
    """Label ``--input`` into ``out`` (online or through the Batch API); fills ``summary``.
    Returns an exit code to stop with, or None to go on."""
    from tqdm.auto import tqdm

    from pruner_model.annotation.batch_api import BatchFailed, BatchLabeler
    from pruner_model.annotation.llm import Annotator, EndpointDown
    from pruner_model.core.records import parse_shard, shard_of

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
