"""Where the default model lives: the trained checkpoint that ships inside the package.

``pruner_model/default_model/`` (bf16 safetensors, tokenizer, ``config.json`` with its
calibrated threshold, model card ``README.md``) is loaded by ``ContextPruner.from_pretrained()``
with no argument and by every command whose ``--model`` is not given. It is rebuilt from the
public QA files by ``scripts/build_default_model.sh`` (docs/data.md).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def default_model_path() -> Path:
    """The folder of the shipped default model (it may be absent in a source tree being rebuilt)."""
    return Path(str(resources.files("pruner_model") / "default_model"))


DEFAULT_MODEL = default_model_path()  # pruner_model.DEFAULT_MODEL


def resolve_default(path: str | Path | None) -> Path | str:
    """``path``, or the default model's folder when ``path`` is None; a one-line error when the
    default is asked for and not installed."""
    if path is not None:
        return path
    folder = default_model_path()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"the default model is not installed at {folder}: reinstall the package, or name a checkpoint"
        )
    return folder
