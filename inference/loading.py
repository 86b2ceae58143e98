"""Where a pruner's files are: a local folder, or a hub repo id fetched into the hub cache."""

from __future__ import annotations

from pathlib import Path


def resolve_model_path(path: str | Path) -> Path:
    """A local folder as is; otherwise a hub repo id (``owner/name``) fetched into the hub cache."""
    local = Path(path)
    if local.exists() or str(path).count("/") != 1 or str(path).startswith((".", "/", "~")):
        return local
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(
            snapshot_download(
                str(path),
                allow_patterns=["*.json", "*.safetensors", "*.onnx", "*.txt", "*.model", "README.md"],
            )
        )
    except (HFValidationError, LocalEntryNotFoundError) as exc:
        raise FileNotFoundError(
            f"no pruner checkpoint at {path}: not a folder, and not in the hub cache ({exc})"
        ) from None


def is_onnx_folder(path: Path) -> bool:
    return (path / "model.onnx").exists() and not (path / "model.safetensors").exists()
