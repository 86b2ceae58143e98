"""`pruner prune`, `pruner export`, `pruner serve` and `pruner evaluate`: thin CLIs over the Python API."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pruner_model.core.records import RecordError, atomic_open, iter_jsonl, read_text
from pruner_model.inference.settings import SelectionParams, add_selection_arguments, selection_overrides


def load_passages(path: str | Path) -> list:
    """Passages from ``.json`` (a list, or an object with "passages"), ``.jsonl`` (one
    ``{id, title, text}`` object a line) or ``.txt`` (the whole file is one passage)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        data = list(iter_jsonl(path))
    elif suffix in {".txt", ".md", ""}:
        return [read_text(path)]
    elif suffix == ".json":
        text = read_text(path)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{path}: malformed JSON ({exc.msg} at line {exc.lineno})") from None
        if isinstance(data, dict):
            data = data.get("passages")
        if not isinstance(data, list):
            raise RecordError(f"{path}: expected a list of passages or an object with 'passages'")
    else:
        raise RecordError(f"{path}: unsupported passages file type {suffix!r} (json, jsonl, txt)")
    for i, p in enumerate(data):
        if not isinstance(p, str) and not (isinstance(p, dict) and isinstance(p.get("text"), str)):
            raise RecordError(f"{path}: passage {i} is neither a string nor an object with 'text'")
    return data


def existing_model_dir(path: str) -> Path:
    """The model folder, or a one-line error before any heavy import."""
    model_dir = Path(path)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model folder not found: {model_dir}")
    return model_dir


def add_precision_argument(p: argparse.ArgumentParser) -> None:
    """``--dtype``: the torch encoder's precision (an ONNX folder has its own)."""
    p.add_argument(
        "--dtype",
        choices=["auto", "fp32", "bf16", "fp16"],
        default=None,
        help="torch backend: the encoder's precision. auto = bf16 where it is native (a GPU with bf16, "
        "a CPU with AVX-512 BF16 or AMX), else fp32; default fp32. bf16 is refused on a CPU without "
        "native bf16 (emulated, tens of times slower), fp16 on any CPU",
    )


def load_pruner(model_dir: Path, args, **kwargs):
    """``ContextPruner.from_pretrained`` with the CLI's backend and ``--dtype``; says on stderr
    what ``--dtype`` resolved to on this machine."""
    from pruner_model.core.precision import machine_info
    from pruner_model.inference.pruner import ContextPruner

    dtype = getattr(args, "dtype", None)
    extra = {"dtype": dtype} if dtype else {}
    pruner = ContextPruner.from_pretrained(model_dir, backend=args.backend, **kwargs, **extra)
    if dtype:
        device = getattr(pruner.backend, "device", "cpu")
        print(
            f"precision: --dtype {dtype} -> {pruner.backend.name} {pruner.precision} "
            f"on {machine_info(device).describe()}",
            file=sys.stderr,
        )
    return pruner


def add_summarizer_arguments(p) -> None:
    """The summarizer of tiered compression (``--summarize``): an OpenAI-compatible endpoint."""
    g = p.add_argument_group("summarizer (the middle tier of --summarize)")
    g.add_argument("--summarizer-model", default=None, help="the endpoint's model name")
    g.add_argument(
        "--summarizer-url", default=None, help="an OpenAI-compatible base URL (default: OPENAI_BASE_URL)"
    )
    g.add_argument(
        "--summarizer-key-env",
        default="OPENAI_API_KEY",
        help="environment variable holding the endpoint's key (never printed)",
    )
    g.add_argument("--summarizer-timeout", type=float, default=20.0, help="seconds per summarizer request")
    g.add_argument(
        "--summarizer-price",
        type=float,
        nargs=2,
        default=(0.0, 0.0),
        metavar=("PROMPT", "COMPLETION"),
        help="USD per million prompt and completion tokens (the summarizer's cost in the stats)",
    )


def summarizer_from_args(args):
    """An ``OpenAISummarizer`` from :func:`add_summarizer_arguments`' flags, or None."""
    if not args.summarizer_model:
        return None
    from pruner_model.inference.summarize import OpenAISummarizer

    if not args.summarizer_timeout > 0:
        raise ValueError(f"--summarizer-timeout must be > 0, got {args.summarizer_timeout}")
    return OpenAISummarizer(
        model=args.summarizer_model,
        base_url=args.summarizer_url,
        api_key_env=args.summarizer_key_env,
        timeout=args.summarizer_timeout,
        price_prompt=args.summarizer_price[0],
        price_completion=args.summarizer_price[1],
    )


def _prune_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner prune",
        description="Prune passages for a query. Reads a checkpoint or ONNX folder and a "
        "passages file; writes the pruned context (text), the full result (json) or a "
        "highlighted page (html) to stdout or --output.",
    )
    p.add_argument("--model", required=True, help="checkpoint or ONNX export folder")
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
            f"(compression {s.compression:.1%})",
            file=sys.stderr,
        )
    if args.output:
        with atomic_open(args.output) as fh:
            fh.write(out + "\n")
    else:
        print(out)
    return 0


def _export_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner export",
        description="Export a checkpoint folder to ONNX (encoder + both heads, dynamic batch and sequence "
        "axes). Writes OUTPUT/model.onnx (+ model.int8.onnx with --quantize int8), config.json, tokenizer "
        "files and export_report.json; fails if the export does not match torch within tolerance.",
    )
    p.add_argument("--model", required=True, help="checkpoint folder (save_pretrained output)")
    p.add_argument("--output", required=True, help="export folder")
    p.add_argument("--quantize", choices=["int8"], default=None, help="also write a dynamic int8 model")
    p.add_argument(
        "--calibration-data",
        default=None,
        metavar="LABELED.jsonl",
        help="with --quantize int8: calibrate the int8 model's own threshold on these labeled records and "
        "keep it only if, each at its own threshold, it keeps fp32's evidence within 0.5 point and its "
        "compression within 1 point (default: keep/drop agreement on fixed sentences)",
    )
    p.add_argument("--calibration-groups", type=int, default=1000, help="groups of --calibration-data used")
    p.add_argument("--opset", type=int, default=17)
    p.add_argument("--no-validate", action="store_true", help="skip the comparison with torch")
    p.add_argument(
        "--no-fuse",
        action="store_true",
        help="skip onnxruntime's transformer fusions (Attention, LayerNorm, GELU) before quantizing",
    )
    return p


def export_main(argv: list[str] | None = None) -> int:
    args = _export_parser().parse_args(argv)
    model_dir = existing_model_dir(args.model)
    calibration = None
    if args.calibration_data is not None:
        if args.quantize != "int8":
            raise ValueError("--calibration-data goes with --quantize int8")
        from pruner_model.core.records import read_jsonl, validate_labeled

        path = args.calibration_data
        calibration = [validate_labeled(r, f"{path}:{i}") for i, r in enumerate(read_jsonl(path), 1)]
    from pruner_model.inference.onnx_export import export_onnx

    report = export_onnx(
        model_dir,
        args.output,
        opset=args.opset,
        quantize=args.quantize,
        calibration_records=calibration,
        calibration_groups=args.calibration_groups,
        validate=not args.no_validate,
        fuse=not args.no_fuse,
    )
    if "fp32_max_abs_diff" in report:
        line = f"fp32 max |Δp| vs torch {report['fp32_max_abs_diff']:.2e} (tolerance {report['fp32_tolerance']:.0e})"
        if "int8_agreement" in report:
            line += f"; int8 keep/drop agreement {report['int8_agreement']:.3f} on {report['int8_sentences']} sentences"
        if "int8_evidence" in report:
            line += (
                f"; on {report['int8_calibration_groups']} labeled groups, fp32 {report['fp32_evidence']:.3f} / "
                f"{report['fp32_compression']:.3f}, int8 at its threshold {report['int8_threshold']:.4f} "
                f"{report['int8_evidence']:.3f} / {report['int8_compression']:.3f} (evidence / compression)"
            )
        print(line, file=sys.stderr)
    if report.get("fused"):
        ops = ", ".join(f"{k} {v}" for k, v in report["fused_operators"].items())
        print(f"fused: {ops}", file=sys.stderr)
    elif report.get("fusion_skipped"):
        print(f"graph not fused ({report['fusion_skipped']})", file=sys.stderr)
    print(f"exported to {args.output}: {', '.join(report['files'])}", file=sys.stderr)
    return 0


# ServerLimits fields as `pruner serve` flags: (field, flag, type, help); whole numbers must be
# >= 1 and seconds > 0
LIMIT_FLAGS = (
    ("max_body_bytes", "--max-body-bytes", int, "request body bytes (413 above)"),
    ("max_passages", "--max-passages", int, "passages per query (422 above)"),
    ("max_passage_chars", "--max-passage-chars", int, "characters per passage (422 above)"),
    ("max_request_tokens", "--max-request-tokens", int, "passage tokens per request (413 above)"),
    ("deadline_s", "--deadline", float, "seconds before a request gets a 504"),
    (
        "max_concurrency",
        "--max-concurrency",
        int,
        "requests in progress at once (503 above; /health and /ready are not counted)",
    ),
    ("max_connections", "--max-connections", int, "open connections, idle ones included (503 above)"),
    (
        "max_readers",
        "--max-readers",
        int,
        "request bodies being received at once, counted apart from the requests in progress (503 above)",
    ),
    (
        "header_timeout_s",
        "--header-timeout",
        float,
        "seconds a client has to send a request's headers before its connection is closed",
    ),
)


def _serve_parser() -> argparse.ArgumentParser:
    from pruner_model.inference.server import ServerLimits

    LIMITS = ServerLimits()  # noqa: N806  the defaults, written once there
    p = argparse.ArgumentParser(
        prog="pruner serve",
        description="Serve a checkpoint or ONNX folder over HTTP: POST /v1/prune, /v1/prune/batch, "
        "/v1/rerank and /v2/rerank (Cohere, Jina), /rerank (TEI); GET /health, /ready, /info, /metrics, "
        "/v1/stats. Binds to 127.0.0.1 unless told otherwise.",
    )
    p.add_argument("--model", required=True, help="checkpoint or ONNX export folder")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", choices=["auto", "torch", "onnx"], default="auto")
    p.add_argument("--quantized", action="store_true", help="use model.int8.onnx of an ONNX folder")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the best available)")
    add_precision_argument(p)
    p.add_argument("--max-batch", type=int, default=32, help="queries per encoder micro-batch")
    p.add_argument("--max-wait-ms", type=float, default=5.0, help="wait for more requests this long")
    for field, flag, kind, help in LIMIT_FLAGS:
        metavar = flag.lstrip("-").upper().replace("-", "_")
        p.add_argument(
            flag, dest=field, metavar=metavar, type=kind, default=getattr(LIMITS, field), help=help
        )
    p.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="environment variable holding the API key: requests then need 'Authorization: Bearer "
        "<key>' (the key is never printed); a variable named here that is unset or empty stops the "
        "server at start-up. Default: PRUNER_API_KEY when it is set (set but empty also stops it)",
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a browser origin allowed to call the server (repeatable; default: none, same-origin only)",
    )
    add_summarizer_arguments(p)
    p.add_argument(
        "--budget-tokenizer",
        action="append",
        default=[],
        metavar="NAME",
        help="a budget_tokenizer requests may name (repeatable; a tiktoken encoding, a tokenizer folder "
        "or hub id; loaded at start-up); default: the pruner's own tokenizer only",
    )
    p.add_argument(
        "--malloc-mmap-threshold",
        type=int,
        default=0,
        metavar="BYTES",
        help="fix glibc's mmap threshold so that requests of every length do not fragment the heap: "
        "resident memory stays flat over a long run, at some speed (docs/serving.md); 1048576 is a "
        "good value; 0: the allocator's own (default)",
    )
    p.add_argument("--access-log", action="store_true", help="log every request (method, path, status)")
    p.add_argument("--no-batching", action="store_true", help="one request at a time (benchmarks)")
    return p


def _api_key(named: str | None, environ) -> str | None:
    """The API key the server requires: the variable ``named`` (which must then be set and not
    empty), else ``PRUNER_API_KEY`` when it is in the environment (set but empty is an error too:
    a key that was meant must never fail open); None when no key is asked for."""
    name = named or "PRUNER_API_KEY"
    if named is None and name not in environ:
        return None
    key = environ.get(name, "")
    if not key.strip():
        state = "is empty" if name in environ else "is not set"
        raise ValueError(
            f"the API key variable {name} {state}: set it, or leave --api-key-env out to serve without a key"
        )
    return key


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve_main(argv: list[str] | None = None) -> int:
    import os

    args = _serve_parser().parse_args(argv)
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1-65535, got {args.port}")
    if args.max_batch < 1 or not args.max_wait_ms >= 0:
        raise ValueError("--max-batch must be >= 1 and --max-wait-ms >= 0")
    for field, flag, kind, _ in LIMIT_FLAGS:
        value = getattr(args, field)
        if (kind is int and value < 1) or (kind is float and not value > 0):
            raise ValueError(f"{flag} must be {'>= 1' if kind is int else '> 0'}, got {value}")
    if args.malloc_mmap_threshold < 0:
        raise ValueError(f"--malloc-mmap-threshold must be >= 0, got {args.malloc_mmap_threshold}")
    api_key = _api_key(args.api_key_env, os.environ)  # before the model loads: a missing key stops at once
    from pruner_model.core.memory import fix_mmap_threshold

    fix_mmap_threshold(args.malloc_mmap_threshold)  # before the model's weights are allocated (0: no-op)
    model_dir = existing_model_dir(args.model)
    import uvicorn
    from pruner_model.inference.http_protocol import protocol_with_header_timeout
    from pruner_model.inference.server import ServerLimits, create_app

    pruner = load_pruner(
        model_dir, args, device=args.device, quantized=args.quantized, summarizer=summarizer_from_args(args)
    )
    limits = ServerLimits(
        **{field: getattr(args, field) for field, *_ in LIMIT_FLAGS},
        budget_tokenizers=tuple(args.budget_tokenizer),
    )
    if api_key is None and not _is_loopback(args.host):
        print(
            f"warning: serving on {args.host}, reachable beyond this machine, without an API key "
            "(set one with --api-key-env)",
            file=sys.stderr,
        )
    app = create_app(  # runs the model self-check: a broken model fails here, with one line
        pruner,
        limits,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        batching=not args.no_batching,
        api_key=api_key,
        cors_origins=tuple(args.cors_origin),
    )
    print(
        f"serving {model_dir} on http://{args.host}:{args.port}" + (" (API key required)" if api_key else ""),
        file=sys.stderr,
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="info" if args.access_log else "warning",
        access_log=args.access_log,
        timeout_keep_alive=5,  # idle keep-alive connections are closed after 5 s
        http=protocol_with_header_timeout(limits.header_timeout_s),  # slow or unfinished headers
        limit_concurrency=limits.max_connections,  # requests in progress: create_app's own cap
        h11_max_incomplete_event_size=64 * 1024,  # headers larger than this are refused
    )
    return 0
