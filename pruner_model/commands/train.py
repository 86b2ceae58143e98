"""`pruner train`: fine-tune a pruner from a YAML config."""

from __future__ import annotations

import argparse
import json
import sys

from pruner_model.commands.common import add_overrides_argument


def _train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pruner train",
        description="Fine-tune a pruner on labeled records (JSONL: id, query, context, relevant_spans) "
        "from a YAML config (docs/training-config.md). Writes OUTPUT/ (checkpoint with the calibrated "
        "threshold, model card README.md, metrics.json, train_config.yaml) and the resumable state in "
        "OUTPUT.trainer/{last,best}. Ctrl-C saves a resumable state.",
    )
    p.add_argument("--config", default=None, help="YAML config (default: built-in defaults)")
    p.add_argument("--output", default=None, help="run folder (default: runs/<config name>)")
    add_overrides_argument(p, "override a config value, e.g. --set train.max_steps=100 (repeatable)")
    p.add_argument("--resume", action="store_true", help="continue the run in --output from its last state")
    p.add_argument(
        "--stop-after",
        type=int,
        default=None,
        metavar="STEPS",
        help="stop after STEPS optimizer steps, saving resumable state (time-boxed runs)",
    )
    return p


def train_main(argv: list[str] | None = None) -> int:
    from pathlib import Path

    from pruner_model.training.config import load_config

    args = _train_parser().parse_args(argv)
    cfg = load_config(args.config, args.overrides)
    output = args.output or str(Path("runs") / (Path(args.config).stem if args.config else "default"))
    from pruner_model.training.trainer import train

    metrics = train(cfg, output, resume=args.resume, stop_after=args.stop_after)
    if metrics.get("interrupted"):
        return 130
    if "rank" in metrics:  # another process of `accelerate launch` published the checkpoint
        return 0
    summary = {k: v for k, v in metrics.get("dev", {}).items()}
    print(json.dumps({"output": output, "dev": summary}, indent=2))
    print(f"checkpoint: {output} (metrics in {Path(output) / 'metrics.json'})", file=sys.stderr)
    return 0
