"""Write a trained checkpoint as the package's default model: bf16 safetensors (half the bytes of
fp32; every backend loads them back as fp32), tokenizer, ``config.json`` with its calibrated
operating point, the run's model card and the held-back measurements (``evaluation.json``).

``python3 -m pruner_model.training.ship RUN [--output FOLDER]`` (``scripts/build_default_model.sh``
runs it after training); the output defaults to ``pruner_model/default_model`` of this source tree.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

MAX_BYTES = 50 * 1024 * 1024  # the wheel carries the model: at most 50 MB
CARRIED = ("README.md", "metrics.json", "evaluation.json")  # besides weights, config and tokenizer


def ship(run: str | Path, output: str | Path) -> Path:
    """Write ``run`` (a checkpoint folder) to ``output`` in bf16, whole or not at all."""
    import torch
    from pruner_model.core.modeling import PrunerModel
    from transformers import AutoTokenizer

    run, output = Path(run), Path(output)
    if not (run / "model.safetensors").is_file():
        raise FileNotFoundError(f"{run}: no model.safetensors (give a trained checkpoint folder)")
    model = PrunerModel.from_pretrained(str(run)).to(torch.bfloat16)
    staging = Path(tempfile.mkdtemp(prefix=".ship-", dir=output.parent if output.parent.is_dir() else None))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        AutoTokenizer.from_pretrained(str(run)).save_pretrained(staging)
        for name in CARRIED:
            if (run / name).is_file():
                shutil.copy2(run / name, staging / name)
        size = sum(f.stat().st_size for f in staging.iterdir())
        if size > MAX_BYTES:
            raise ValueError(
                f"{run}: {size / 2**20:.1f} MiB in bf16, over the {MAX_BYTES // 2**20} MiB a wheel may carry"
            )
        if output.exists():
            shutil.rmtree(output)
        staging.rename(output)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return output


def main(argv: list[str] | None = None) -> int:
    from pruner_model.core.default_model import default_model_path

    p = argparse.ArgumentParser(prog="python3 -m pruner_model.training.ship", description=__doc__)
    p.add_argument("run", help="a trained checkpoint folder (pruner train --output)")
    p.add_argument("--output", default=None, help="default: the package's default_model folder")
    args = p.parse_args(argv)
    try:
        out = ship(args.run, args.output or default_model_path())
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in out.iterdir()) / 2**20
    print(f"wrote the default model to {out} ({size:.1f} MiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
