"""Export: a checkpoint to an ONNX folder that :class:`~pruner_model.inference.ContextPruner`
serves with onnxruntime, as optimum separates the steps: the graph export and fusion
(:mod:`~pruner_model.export.onnx`), its validation against the torch model
(:mod:`~pruner_model.export.validate`) and int8 quantization with the int8 model's own threshold
(:mod:`~pruner_model.export.quantize`).

May import :mod:`pruner_model.core`, :mod:`pruner_model.evaluation` and
:mod:`pruner_model.inference`; nothing imports it but the ``pruner export`` command.
"""

from pruner_model.export.onnx import EXPORT_FILES, ExportError, export_onnx

__all__ = ["EXPORT_FILES", "ExportError", "export_onnx"]
