"""The `pruner` console script: one subcommand per part, each a thin ``main(argv) -> int``.

Subcommands are imported lazily by name, so ``pruner_model`` does not import the other parts
and ``pruner prune`` does not pay for importing the training stack.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

COMMANDS = {
    "data": ("pruner_model.commands.data", "data_main", "build labeled records from QA data sets"),
    "annotate": (
        "pruner_model.commands.annotate",
        "annotate_main",
        "label (query, passages) groups with an LLM",
    ),
    "train": ("pruner_model.commands.train", "train_main", "fine-tune a pruner from a YAML config"),
    "backbone": (
        "pruner_model.training.backbones",
        "backbone_main",
        "write a registry-installed encoder as a Hugging Face folder",
    ),
    "evaluate": (
        "pruner_model.commands.evaluate",
        "evaluate_main",
        "measure compression vs evidence kept",
    ),
    "calibrate": (
        "pruner_model.commands.calibrate",
        "calibrate_main",
        "calibrate the default threshold on labeled records of your text",
    ),
    "adapt": (
        "pruner_model.commands.adapt",
        "adapt_main",
        "fine-tune and calibrate a checkpoint on labeled records of your text, with a report",
    ),
    "prune": ("pruner_model.commands.prune", "prune_main", "prune passages for a query"),
    "export": ("pruner_model.commands.export", "export_main", "export a checkpoint to ONNX"),
    "serve": ("pruner_model.commands.serve", "serve_main", "serve a pruner over HTTP"),
    "mcp": ("pruner_model.integrations.mcp", "mcp_main", "serve a pruner as an MCP tool (stdio)"),
}


def _usage() -> str:
    lines = ["usage: pruner <command> [options]", "", "commands:"]
    lines += [f"  {name:<9} {doc}" for name, (_, _, doc) in COMMANDS.items()]
    lines += ["", "Run 'pruner <command> --help' for a command's options."]
    return "\n".join(lines)


class _LineHandler(logging.Handler):
    """Log records as lines on stderr, written through tqdm so that a progress bar is not torn."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm.auto import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # a log line must never fail the command
            self.handleError(record)


def configure_logging() -> None:
    """The library logs through ``logging.getLogger(__name__)``; the CLI shows its INFO lines
    (DEBUG with ``PRUNER_DEBUG=1``) as plain lines on stderr. Idempotent."""
    logger = logging.getLogger("pruner_model")
    if not any(isinstance(h, _LineHandler) for h in logger.handlers):
        handler = _LineHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if os.environ.get("PRUNER_DEBUG") else logging.INFO)


def run_guarded(fn, argv) -> int:
    """Run a subcommand; any error becomes one line on stderr (PRUNER_DEBUG=1 re-raises)."""
    try:
        return int(fn(argv) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the user sees one line, never a traceback
        if os.environ.get("PRUNER_DEBUG"):
            raise
        from pruner_model.core.records import error_line

        print(f"error: {error_line(exc)}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0 if argv else 2
    if argv[0] in {"-V", "--version"}:
        from . import __version__

        print(__version__)
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-file "Loading weights" bars drown our own progress
    configure_logging()
    try:
        fn = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        print(f"error: 'pruner {name}' is not available: {exc}", file=sys.stderr)
        return 2
    return run_guarded(fn, argv[1:])


if __name__ == "__main__":
    sys.exit(main())
