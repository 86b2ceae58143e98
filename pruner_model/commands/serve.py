"""`pruner serve`: the HTTP server on a checkpoint or ONNX folder."""

from __future__ import annotations

import argparse
import sys

from pruner_model.commands.common import (
    DEFAULT_MODEL_HELP,
    add_precision_argument,
    add_quantized_argument,
    add_summarizer_arguments,
    existing_model_dir,
    load_pruner,
    say_precision,
    summarizer_from_args,
)

# ServerLimits fields as `pruner serve` flags: (field, flag, type, help); whole numbers must be
# >= 1 and seconds > 0 (those of MAY_BE_ZERO >= 0)
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
    (
        "refusal_delay_s",
        "--refusal-delay",
        float,
        "seconds before a refused request (4xx) is answered, counted from its arrival, so that a "
        "client sending refused requests in a loop cannot take the CPU from others (0: at once)",
    ),
)
MAY_BE_ZERO = ("refusal_delay_s",)


def _serve_parser() -> argparse.ArgumentParser:
    from pruner_model.serving.app import ServerLimits

    LIMITS = ServerLimits()  # noqa: N806  the defaults, written once there
    p = argparse.ArgumentParser(
        prog="pruner serve",
        description="Serve a checkpoint or ONNX folder over HTTP: POST /v1/prune, /v1/prune/batch, "
        "/v1/rerank and /v2/rerank (Cohere, Jina), /rerank (TEI); GET /health, /ready, /info, /metrics, "
        "/v1/stats. Binds to 127.0.0.1 unless told otherwise.",
    )
    p.add_argument("--model", default=None, help=f"checkpoint or ONNX export folder {DEFAULT_MODEL_HELP}")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", choices=["auto", "torch", "onnx"], default="auto")
    add_quantized_argument(p)
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


def _check_numbers(args) -> None:
    """The port, batching and limit flags in range, before anything loads."""
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1-65535, got {args.port}")
    if args.max_batch < 1 or not args.max_wait_ms >= 0:
        raise ValueError("--max-batch must be >= 1 and --max-wait-ms >= 0")
    for field, flag, kind, _ in LIMIT_FLAGS:
        value = getattr(args, field)
        if field in MAY_BE_ZERO:
            if not 0 <= value < float("inf"):
                raise ValueError(f"{flag} must be >= 0, got {value}")
        elif (kind is int and value < 1) or (kind is float and not value > 0):
            raise ValueError(f"{flag} must be {'>= 1' if kind is int else '> 0'}, got {value}")
    if args.malloc_mmap_threshold < 0:
        raise ValueError(f"--malloc-mmap-threshold must be >= 0, got {args.malloc_mmap_threshold}")


def serve_main(argv: list[str] | None = None) -> int:
    import os

    args = _serve_parser().parse_args(argv)
    _check_numbers(args)
    api_key = _api_key(args.api_key_env, os.environ)  # before the model loads: a missing key stops at once
    from pruner_model.core.memory import fix_mmap_threshold

    fix_mmap_threshold(args.malloc_mmap_threshold)  # before the model's weights are allocated (0: no-op)
    model_dir = existing_model_dir(args.model)
    import uvicorn

    from pruner_model.serving.app import ServerLimits, create_app
    from pruner_model.serving.protocol import protocol_with_header_timeout

    pruner = load_pruner(
        model_dir,
        args,
        say=False,
        device=args.device,
        quantized=args.quantized,
        summarizer=summarizer_from_args(args),
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
    say_precision(pruner, args.dtype, chosen=True)  # once the model passed its self-check
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
