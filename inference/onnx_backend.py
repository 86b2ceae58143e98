"""onnxruntime backend: the same question as the torch backend, answered with no torch."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
from pruner_model.core.scoring import batch_tokens, call_tokens

logger = logging.getLogger(__name__)


def _export_report(path: Path) -> dict:
    """The folder's ``export_report.json`` ({} when absent or unreadable)."""
    try:
        report = json.loads((path / "export_report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def _unchecked(path: Path) -> bool:
    """The export report says the folder was not validated (``pruner export --no-validate``)."""
    return _export_report(path).get("validated") is False


def validated_int8(path: Path) -> float | None:
    """The keep/drop agreement of the folder's int8 graph with fp32 when its export checked and
    kept it (``model.int8.onnx`` present, ``int8_ok`` in the report), else None."""
    report = _export_report(path)
    if report.get("validated") is False or report.get("int8_ok") is not True:
        return None
    if "model.int8.onnx" not in (report.get("files") or []) or not (path / "model.int8.onnx").is_file():
        return None
    agreement = report.get("int8_agreement")
    return float(agreement) if isinstance(agreement, int | float) else None


def default_providers(device: str | None = None) -> list[str]:
    """CUDA when asked for (or, with ``device=None``, when the installed onnxruntime has it), else CPU."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    if device == "cpu":
        return ["CPUExecutionProvider"]
    if device in (None, "auto", "cuda") and "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    if device == "cuda":
        raise RuntimeError(
            "device='cuda' but this onnxruntime has no CUDAExecutionProvider (pip install onnxruntime-gpu)"
        )
    return ["CPUExecutionProvider"]


class OnnxBackend:
    """Runs ``model.onnx`` (or ``model.int8.onnx``) from an export folder."""

    name = "onnx"
    chosen: str | None = None  # why the int8 graph was picked without being asked for
    cached: Path | None = None  # the cached export of a checkpoint this runs (inference.loading)

    def __init__(
        self,
        model_path: str | Path,
        providers: list[str] | None = None,
        threads: int | None = None,
        device: str | None = None,
    ):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        # full graph optimization fuses attention/GELU/LayerNorm; sequential execution is fastest
        # for a single encoder graph; thread count defaults to the machine's physical cores
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        threads = threads or int(os.environ.get("PRUNER_ORT_THREADS", "0"))
        if threads:
            opts.intra_op_num_threads = threads
        opts.log_severity_level = 3
        self.providers = providers or default_providers(device)
        self.session = ort.InferenceSession(str(model_path), sess_options=opts, providers=self.providers)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.model_path = Path(model_path)
        self.precision = "int8" if self.model_path.name.endswith(".int8.onnx") else "fp32"
        on_cpu = self.providers[0] == "CPUExecutionProvider"
        self.batch_tokens = batch_tokens(on_cpu)  # padded tokens a call
        self.call_tokens = call_tokens(on_cpu)  # a call's fixed cost, for the batch plan

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        device: str | None = None,
        quantized: bool | None = False,
        providers: list[str] | None = None,
        threads: int | None = None,
    ) -> OnnxBackend:
        path = Path(path)
        file = path / ("model.int8.onnx" if quantized else "model.onnx")
        if not file.is_file():
            raise FileNotFoundError(
                f"no {file.name} in {path} (run 'pruner export'{' --quantize int8' if quantized else ''})"
            )
        if quantized and _unchecked(path):
            logger.warning(
                f"{file} was written with --no-validate: its decisions were never compared with fp32's"
            )
        return cls(file, providers=providers, threads=threads, device=device)

    def __call__(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        feeds = {n: batch[n].astype(np.int64, copy=False) for n in self.input_names}
        token_logits, relevance_logits = self.session.run(["token_logits", "relevance_logits"], feeds)
        return token_logits.astype(np.float32, copy=False), relevance_logits.astype(np.float32, copy=False)
