"""What the model commands share: the model folder, its backend and precision, passages files and
the summarizer's flags."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pruner_model.core.records import RecordError, iter_jsonl, read_text


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


DEFAULT_MODEL_HELP = "(default: the trained model that ships with the package)"


def existing_model_dir(path: str | None) -> Path:
    """The model folder (None: the shipped default model), or a one-line error before any heavy import."""
    from pruner_model.core.default_model import resolve_default

    model_dir = Path(resolve_default(path))
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model folder not found: {model_dir}")
    return model_dir


def number_or_none(text: str) -> float | None:
    """An argument that is a number, or ``none``."""
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number in [0, 1] or none, got {text!r}") from None


def add_overrides_argument(p: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE`` (repeatable) into ``overrides``: values of a training config."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help)


def add_quantized_argument(p: argparse.ArgumentParser) -> None:
    """``--quantized`` / ``--no-quantized``: which graph of an ONNX folder (default: the int8 one
    on a CPU when the export validated and kept it)."""
    p.add_argument(
        "--quantized",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="an ONNX folder's model.int8.onnx (--no-quantized: model.onnx; for a checkpoint, torch); default: "
        "int8 on a CPU when the export validated and kept it, and for a checkpoint with an export cached by "
        "`pruner export --cache` on a CPU without native bf16 or with VNNI and no AMX",
    )


def add_precision_argument(p: argparse.ArgumentParser) -> None:
    """``--dtype``: the torch encoder's precision (an ONNX folder has its own)."""
    p.add_argument(
        "--dtype",
        choices=["auto", "fp32", "bf16", "fp16"],
        default=None,
        help="torch backend: the encoder's precision. auto = bf16 where it is native (a GPU with bf16, "
        "a CPU with AVX-512 BF16 or AMX), else fp32; default: bf16 where it is native and its keep/drop "
        "decisions agree with fp32's on fixed validation sentences, else fp32. bf16 is refused on a CPU without "
        "native bf16 (emulated, tens of times slower), fp16 on any CPU",
    )


def load_pruner(model_dir: Path, args, say: bool = True, **kwargs):
    """``ContextPruner.from_pretrained`` with the CLI's backend and ``--dtype``; says on stderr
    what ``--dtype`` resolved to on this machine, or which precision was chosen without it
    (``say=False``: the caller says it, e.g. once the model passed its self-check)."""
    from pruner_model.inference.pruner import ContextPruner

    dtype = getattr(args, "dtype", None)
    extra = {"dtype": dtype} if dtype else {}
    if "quantized" not in kwargs and getattr(args, "quantized", None) is not None:
        extra["quantized"] = args.quantized  # --quantized / --no-quantized
    pruner = ContextPruner.from_pretrained(model_dir, backend=args.backend, **kwargs, **extra)
    if say:  # a checkpoint's cached int8 export is said at once: no flag asked for it
        say_precision(pruner, dtype, chosen=getattr(pruner.backend, "cached", None) is not None)
    return pruner


def say_precision(pruner, dtype: str | None, chosen: bool = False) -> None:
    """One line on stderr: the precision ``--dtype`` resolved to, or (``chosen``: a server says it
    at start-up) the one chosen without it."""
    from pruner_model.core.precision import machine_info

    device = getattr(pruner.backend, "device", "cpu")
    if dtype:
        print(
            f"precision: --dtype {dtype} -> {pruner.backend.name} {pruner.precision} "
            f"on {machine_info(device).describe()}",
            file=sys.stderr,
        )
    elif chosen and getattr(pruner.backend, "chosen", None):  # the export's validated int8 graph
        print(
            f"precision: {pruner.backend.name} {pruner.precision} on {machine_info(device).describe()} "
            f"({pruner.backend.chosen}; --no-quantized for fp32)",
            file=sys.stderr,
        )
    elif chosen and pruner.precision_agreement is not None:  # from_pretrained chose it: which, and why
        print(
            f"precision: {pruner.backend.name} {pruner.precision} on {machine_info(device).describe()} "
            f"(bf16 keep/drop agreement with fp32 {pruner.precision_agreement:.3f} on the validation "
            "sentences, 0.98 needed; --dtype fp32 to force fp32)",
            file=sys.stderr,
        )


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


def add_endpoint_arguments(p: argparse.ArgumentParser) -> None:
    """Where the OpenAI-compatible endpoint is and which variable holds its key."""
    p.add_argument("--base-url", default=None, help="endpoint (default: $OPENAI_BASE_URL)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")


def add_request_arguments(p: argparse.ArgumentParser) -> None:
    """How online requests are sent, retried, bounded and priced."""
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


def endpoint_settings(args, model: str | None, model_flag: str = "--model"):
    """The labeler's settings from the request arguments (:func:`add_request_arguments`) and the
    endpoint's ``--base-url`` / ``--api-key-env``, for the LLM ``model``."""
    from pruner_model.annotation.settings import AnnotatorSettings

    if not model:
        raise ValueError(f"{model_flag} is required (or set OPENAI_MODEL)")
    if args.max_connection_failures < 1:
        raise ValueError("--max-connection-failures must be >= 1")
    return AnnotatorSettings(
        model=model,
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


def add_corpus_arguments(p: argparse.ArgumentParser) -> None:
    c = p.add_argument_group("--corpus: documents to questions, groups and labels")
    c.add_argument(
        "--queries", default=None, help="a query log (JSONL of {query}) used instead of written questions"
    )
    c.add_argument(
        "--llm-model", default=None, help="the LLM that writes questions and labels ($OPENAI_MODEL)"
    )
    c.add_argument(
        "--chunk-words", type=int, default=150, help="words a chunk at most; 0: each document as it is"
    )
    c.add_argument(
        "--chunk-overlap", type=int, default=1, help="sentences repeated at the next chunk's start"
    )
    c.add_argument("--questions", type=int, default=1000, help="questions to write (default 1000)")
    c.add_argument("--questions-per-chunk", type=int, default=2, help="questions asked of a sampled chunk")
    c.add_argument(
        "--unanswered-share", type=float, default=0.1, help="chunks also asked a question they do not answer"
    )
    c.add_argument("--passages", type=int, default=5, help="chunks in a question's group (default 5)")
    c.add_argument("--bm25", type=int, default=2, help="of them mined by BM25 (default 2)")
    c.add_argument("--dense", type=int, default=1, help="of them mined by the bundled bi-encoder (default 1)")
    c.add_argument(
        "--answerless-share", type=float, default=0.15, help="groups without the question's document"
    )
    add_endpoint_arguments(c)
    add_request_arguments(c)
