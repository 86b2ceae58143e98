"""Where a pruner's files are (a local folder, or a hub repo id fetched into the hub cache), and
which encoder runs them: torch, the folder's ONNX graph, or a checkpoint's cached int8 export."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from pruner_model.core.records import error_line

logger = logging.getLogger(__name__)
CACHE_ENV = "PRUNER_CACHE"  # where `pruner export --cache` writes (default ~/.cache/pruner_model)


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


def load_config(path: Path):
    """The folder's ``PrunerConfig``, or a one-line ValueError naming what is wrong with it."""
    from pruner_model.core.configuration import PrunerConfig

    try:
        return PrunerConfig.from_pretrained(str(path))
    except (ValueError, TypeError, OSError) as exc:  # json errors are ValueErrors
        raise ValueError(f"{path / 'config.json'}: not a usable pruner config ({error_line(exc)})") from None


def load_tokenizer(path: Path):
    """The folder's tokenizer, or a one-line ValueError (a broken or dangling tokenizer.json)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (ValueError, TypeError, OSError) as exc:  # a broken or dangling tokenizer.json
        raise ValueError(f"{path}: the tokenizer files cannot be read ({error_line(exc)})") from None


def load_parts(path: str | Path):
    """The checkpoint or export folder ``path`` (or hub repo id) resolved, its config and its
    tokenizer, checked to fit each other; FileNotFoundError when there is no pruner there."""
    from pruner_model.core.configuration import check_fits

    path = resolve_model_path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no pruner checkpoint at {path} (config.json missing)")
    config, tokenizer = load_config(path), load_tokenizer(path)
    check_fits(config, tokenizer, str(path))
    return path, config, tokenizer


def export_cache_dir(path: Path) -> Path:
    """Where ``pruner export --cache`` writes the ONNX export of the checkpoint folder ``path``, and
    where a no-flag load of that checkpoint on a CPU that prefers int8 looks for its int8 graph:
    ``$PRUNER_CACHE`` (default ``~/.cache/pruner_model``) ``/onnx/`` + a digest of its
    ``config.json`` and ``model.safetensors``, so that another training, a recalibration or an
    edited config never meets an export of other weights or another threshold."""
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors"):
        with open(path / name, "rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "pruner_model")
    return root / "onnx" / digest.hexdigest()[:20]


def int8_candidate(path: Path, device, backend_kwargs: dict) -> Path | None:
    """The cached export (:func:`export_cache_dir`) of the checkpoint ``path`` whose validated int8
    graph a load with nothing asked for (no ``dtype``, no ``quantized``) may run instead of torch:
    on a CPU that prefers int8 (:func:`~pruner_model.core.precision.cpu_prefers_int8`: no native
    bf16, or int8 dot products (VNNI) without AMX), built first when none is cached
    (:mod:`~pruner_model.inference.int8_build`). None otherwise (or without onnxruntime); where it
    could run but no int8 graph is cached, logs (debug) how to cache one."""
    from pruner_model.core.precision import cpu_prefers_int8, int8_reason
    from pruner_model.inference.int8_build import auto_build_enabled, build_int8_export

    if backend_kwargs.get("dtype") is not None or backend_kwargs.get("quantized") is not None:
        return None  # a torch precision asked for, "auto" included, runs torch
    if str(device or "auto") not in ("cpu", "auto") or not cpu_prefers_int8():
        return None
    try:
        from pruner_model.inference.onnx_backend import default_providers, validated_int8
    except ImportError:
        return None
    if not (path / "model.safetensors").is_file() or default_providers(device)[0] != "CPUExecutionProvider":
        return None
    cache = export_cache_dir(path)
    if not (cache / "export_report.json").is_file() and auto_build_enabled():
        build_int8_export(path, cache)  # once per checkpoint and machine (inference.int8_build)
    if (cache / "model.onnx").is_file() and validated_int8(cache) is not None:
        return cache
    logger.debug(
        f"{int8_reason()}: the checkpoint runs torch; an int8 export runs faster and is "
        f"used by itself once cached: pruner export --model {path} --cache --quantize int8"
    )
    return None


def cached_int8(path: Path, device, backend_kwargs: dict) -> tuple[Path | None, Path | None]:
    """``(run, to_time)``: the cached export whose int8 graph a load of the checkpoint ``path``
    runs instead of torch (with ``quantized=True``, wherever it is cached; with nothing asked for,
    the :func:`int8_candidate`, except where bf16 is native too: there only once its int8 graph
    was measured faster than the checkpoint's own no-flag torch precision on this CPU class), and,
    where it has not been measured yet, the export :func:`settle_precision` times against the
    checkpoint loaded in torch (:mod:`~pruner_model.inference.int8_speed`)."""
    from pruner_model.core.precision import cpu_has_bf16
    from pruner_model.inference.int8_speed import recorded_verdict

    if backend_kwargs.get("quantized"):
        if backend_kwargs.get("dtype") not in (None, "auto") or not (path / "model.safetensors").is_file():
            return None, None
        cache = export_cache_dir(path)
        return (cache if (cache / "model.int8.onnx").is_file() else None), None
    cache = int8_candidate(path, device, backend_kwargs)
    if cache is None or not cpu_has_bf16():
        return cache, None
    verdict = recorded_verdict(cache)  # bf16 is native: int8 only where measured faster
    return (cache if verdict else None), (cache if verdict is None else None)


def settle_precision(pruner) -> float | None:
    """After a load with no precision asked for: the torch backend keeps bf16 where it is native
    and agrees with fp32 (:func:`~pruner_model.inference.agreement.choose_precision`); then, where
    the load left an int8 graph to time (``backend.int8_to_time``: bf16 native, not yet measured on
    this CPU class), the graph is timed against the torch backend in that precision, once, and
    replaces it when faster (:mod:`~pruner_model.inference.int8_speed`). Returns bf16's agreement
    with fp32 (None when no bf16 was tried or int8 runs)."""
    from pruner_model.inference.agreement import choose_precision
    from pruner_model.inference.int8_speed import int8_outruns_torch

    agreement = choose_precision(pruner)[1]
    cache = getattr(pruner.backend, "int8_to_time", None)
    if cache is None or (int8 := int8_outruns_torch(pruner.backend, pruner.tokenizer, cache)) is None:
        return agreement
    pruner.backend = use_int8(int8, pruner.config, cache)
    return None


def use_int8(impl, config, cache: Path | None, said: bool = True):
    """The int8 backend ``impl`` with where it came from (``cached``, and ``chosen`` when it was
    not asked for: ``said``), and ``config`` set to the int8 graph's own calibrated threshold where
    the export has one (that of the cached export ``cache`` for a checkpoint)."""
    from pruner_model.inference.onnx_backend import validated_int8

    if cache is not None:
        config.int8_threshold = load_config(cache).int8_threshold
    if said:
        impl.chosen = (
            f"int8 keep/drop agreement with fp32 {validated_int8(impl.model_path.parent):.3f} at export"
        )
        if cache is not None:
            impl.chosen = f"the checkpoint's int8 export cached in {cache}, {impl.chosen}"
    impl.cached = cache  # the checkpoint's cached export it runs, if that is where it came from
    if config.int8_threshold is not None:
        config.threshold = config.int8_threshold  # the int8 graph's own calibrated threshold
        config.threshold_model = None  # which was fitted on fp32 scores: the int8 one stands
        config.operating_points = None  # calibrated on the full-precision scores
    return impl


def load_backend(path: Path, config, backend: str, device, show_progress_bar: bool, **backend_kwargs):
    """The encoder of the folder ``path``: ``"torch"`` (its safetensors), ``"onnx"`` (its
    ``model.onnx``, or ``model.int8.onnx`` with ``quantized=True``, whose own calibrated threshold
    then replaces ``config``'s; with ``quantized`` not given, int8 on a CPU when the export validated
    and kept it, fp32 otherwise) or ``"auto"`` (ONNX when the folder has no safetensors)."""
    from pruner_model.inference.backends import TorchBackend

    cached = to_time = None
    if backend == "auto":
        backend = "onnx" if is_onnx_folder(path) else "torch"
        if backend == "torch":
            cached, to_time = cached_int8(path, device, backend_kwargs)
        if cached is not None:
            backend, path = "onnx", cached  # the same weights and config, exported and validated
    if backend == "torch":
        if not (path / "model.safetensors").is_file():
            raise FileNotFoundError(f"no model.safetensors in {path}")
        if backend_kwargs.pop("quantized", False):
            raise ValueError(
                f"{path} is a torch checkpoint; int8 needs an ONNX export "
                f"(pruner export --model {path} --cache --quantize int8, or --output DIR and load DIR)"
            )
        impl = TorchBackend.from_pretrained(
            path, device=device, show_progress_bar=show_progress_bar, **backend_kwargs
        )
        impl.int8_to_time = to_time  # timed against it once it has chosen its precision
        return impl
    elif backend == "onnx":
        from pruner_model.inference.onnx_backend import OnnxBackend, default_providers, validated_int8

        if backend_kwargs.pop("dtype", None) not in (None, "auto", "fp32"):
            raise ValueError("dtype applies to the torch backend; an ONNX folder has its own precision")
        asked = backend_kwargs.get("quantized")
        if asked is None:  # not asked: int8 on a CPU where the export kept it
            on_cpu = default_providers(device)[0] == "CPUExecutionProvider"
            backend_kwargs["quantized"] = validated_int8(path) is not None and on_cpu
        impl = OnnxBackend.from_pretrained(path, device=device, **backend_kwargs)
        if backend_kwargs["quantized"]:
            use_int8(impl, config, cached, said=asked is None)
        return impl
    raise ValueError(f"backend must be 'auto', 'torch' or 'onnx', got {backend!r}")
