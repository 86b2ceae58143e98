"""`pruner prune` (and, with the ONNX issue, `pruner export` / `pruner serve`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pruner_model.records import RecordError, atomic_open, iter_jsonl, read_text


def load_passages(path: str | Path) -> list:
    """Passages from ``.json`` (a list, or an object with "passages"), ``.jsonl`` (one string
    or ``{id, title, text}`` object a line) or ``.txt`` (the whole file is one passage)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        items = []
        for obj in iter_jsonl(path):
            items.append(obj)
        return items
    text = read_text(path)
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{path}: malformed JSON ({exc.msg} at line {exc.lineno})") from None
        if isinstance(data, dict):
            data = data.get("passages")
        if not isinstance(data, list):
            raise RecordError(f"{path}: expected a list of passages or an object with 'passages'")
        for i, p in enumerate(data):
            if not isinstance(p, str) and not (isinstance(p, dict) and isinstance(p.get("text"), str)):
                raise RecordError(f"{path}: passage {i} is neither a string nor an object with 'text'")
        return data
    if suffix in {".txt", ".md", ""}:
        return [text]
    raise RecordError(f"{path}: unsupported passages file type {suffix!r} (json, jsonl, txt)")


def _prune_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner prune",
        description="Prune passages for a query. Reads a checkpoint or ONNX folder and a "
        "passages file; writes the pruned context (text), the full result (json) or a "
        "highlighted page (html) to stdout or --output.",
    )
    p.add_argument("--model", required=True, help="checkpoint or ONNX export folder")
    p.add_argument("--query", required=True, help="the question the context must answer")
    p.add_argument("--passages", required=True, help="passages file: .json, .jsonl or .txt")
    p.add_argument("--threshold", type=float, default=None, help="keep threshold (default: the checkpoint's)")
    p.add_argument("--token-budget", type=int, default=None, help="max kept tokens over all passages")
    p.add_argument("--neighbors", type=int, default=0, help="also keep ±N sentences of the same paragraph")
    p.add_argument("--keep-top", type=int, default=0, help="always keep the N best sentences")
    p.add_argument("--backend", choices=["auto", "torch", "onnx"], default="auto")
    p.add_argument("--format", choices=["text", "json", "html"], default="text")
    p.add_argument("--output", default=None, help="write here instead of stdout")
    return p


def prune_main(argv: list[str] | None = None) -> int:
    args = _prune_parser().parse_args(argv)
    if not args.query.strip():
        raise ValueError("--query is empty")
    passages = load_passages(args.passages)
    model_dir = Path(args.model)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model folder not found: {model_dir}")
    from .pruner import ContextPruner

    pruner = ContextPruner.from_pretrained(model_dir, backend=args.backend)
    result = pruner.prune(
        args.query,
        passages,
        threshold=args.threshold,
        token_budget=args.token_budget,
        neighbors=args.neighbors,
        keep_top=args.keep_top,
    )
    if args.format == "json":
        out = json.dumps(result.to_dict(), indent=2, ensure_ascii=False)
    elif args.format == "html":
        from .html import render_html

        texts = [p if isinstance(p, str) else p["text"] for p in passages]
        out = render_html(result, texts)
    else:
        s = result.stats
        out = result.text
        print(
            f"kept {s.sentences_out}/{s.sentences_in} sentences, {s.tokens_out}/{s.tokens_in} tokens "
            f"(compression {s.compression:.1%})",
            file=sys.stderr,
        )
    if args.output:
        with atomic_open(args.output) as fh:
            fh.write(out + "\n")
    else:
        print(out)
    return 0
