"""What the model commands share: the model folder, its backend and precision, passages files and
the summarizer's flags."""

from __future__ import annotations

import argparse
import json
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
        help="an ONNX folder's model.int8.onnx (--no-quantized: model.onnx); default: int8 on a CPU when "
        "the export validated and kept it",
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
    if say:
        say_precision(pruner, dtype)
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
