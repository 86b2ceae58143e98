"""`pruner prune`: prune a passages file (or a JSONL of requests) for a query."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pruner_model.commands.common import (
    DEFAULT_MODEL_HELP,
    add_precision_argument,
    add_quantized_argument,
    add_summarizer_arguments,
    existing_model_dir,
    load_passages,
    load_pruner,
    summarizer_from_args,
)
from pruner_model.core.records import atomic_open
from pruner_model.inference.settings import SelectionParams, add_selection_arguments, selection_overrides


def _prune_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner prune",
        description="Prune passages for a query. Reads a checkpoint or ONNX folder and a "
        "passages file; writes the pruned context (text), the full result (json) or a "
        "highlighted page (html) to stdout or --output.",
    )
    p.add_argument("--model", default=None, help=f"checkpoint or ONNX export folder {DEFAULT_MODEL_HELP}")
    p.add_argument("--query", default=None, help="the question the context must answer")
    p.add_argument("--passages", default=None, help="passages file: .json, .jsonl or .txt")
    p.add_argument(
        "--input",
        default=None,
        help="batch mode: a JSONL of raw groups {id, query, passages}; one output line per group "
        "({id, ...result}) appended to --output, resumable",
    )
    p.add_argument(
        "--shard", default=None, metavar="K/N", help="batch mode: only this shard of the ids (stable hash)"
    )
    p.add_argument("--batch-size", type=int, default=16, help="batch mode: queries per encoder run")
    add_selection_arguments(p)
    add_summarizer_arguments(p)
    p.add_argument("--backend", choices=["auto", "torch", "onnx"], default="auto")
    add_quantized_argument(p)
    add_precision_argument(p)
    p.add_argument("--format", choices=["text", "json", "html"], default="text")
    p.add_argument("--output", default=None, help="write here instead of stdout (batch mode: required)")
    return p


def _prune_file_main(args, overrides: dict) -> int:
    from pruner_model.core.records import parse_shard
    from pruner_model.inference.batch import prune_file

    if args.query is not None or args.passages is not None:
        raise ValueError("--input (batch mode) replaces --query/--passages")
    if not args.output:
        raise ValueError("--input needs --output (the JSONL the results are appended to)")
    shard = parse_shard(args.shard)
    if not Path(args.input).is_file():
        raise FileNotFoundError(f"no such file: {args.input}")
    pruner = load_pruner(existing_model_dir(args.model), args, summarizer=summarizer_from_args(args))
    params = pruner.selection_params(**overrides)
    stats = prune_file(pruner, args.input, args.output, params, shard, args.batch_size)
    rate = stats.done / stats.seconds if stats.seconds else 0.0
    print(
        f"{stats.done} groups pruned ({rate:.1f} queries/s), {stats.skipped} already in {args.output}"
        + (f", {stats.other_shards} in other shards" if stats.other_shards else ""),
        file=sys.stderr,
    )
    return 0


def prune_main(argv: list[str] | None = None) -> int:
    args = _prune_parser().parse_args(argv)
    if args.output and Path(args.output).is_dir():
        raise ValueError(f"--output {args.output} is a folder: give a file path")
    overrides = selection_overrides(args)
    SelectionParams().replace(**overrides)  # a bad setting fails before the model loads
    if args.input is not None:
        return _prune_file_main(args, overrides)
    if args.query is None or args.passages is None:
        raise ValueError("give --query and --passages (or --input for a file of groups)")
    if not args.query.strip():
        raise ValueError("--query is empty")
    passages = load_passages(args.passages)
    pruner = load_pruner(existing_model_dir(args.model), args, summarizer=summarizer_from_args(args))
    pruner.progress_above = 256  # long inputs show a progress bar
    result = pruner.prune(args.query, passages, **overrides)
    if args.format == "json":
        out = json.dumps(result.to_dict(), indent=2, ensure_ascii=False)
    elif args.format == "html":
        from pruner_model.inference.html import render_html

        out = render_html(result)
    else:
        s = result.stats
        out = result.text
        print(
            f"kept {s.sentences_out}/{s.sentences_in} sentences, {s.tokens_out}/{s.tokens_in} tokens "
            f"(compression {s.compression:.1%})"
            + (
                "; the request reads unlike the model's calibration text: its safest threshold"
                if s.unfamiliar
                else ""
            ),
            file=sys.stderr,
        )
    if args.output:
        with atomic_open(args.output) as fh:
            fh.write(out + "\n")
    else:
        print(out)
    return 0
