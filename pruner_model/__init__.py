"""Provence-style neural span pruner: model, segmentation and alignment shared by all parts.

Segmentation, alignment and the config need no torch, so a torch-free ONNX serving install can
import this package; the model classes are loaded (and registered with ``AutoModel``) only when
torch is installed.
"""

import importlib.util

from transformers import AutoConfig

from .alignment import IGNORE_INDEX, Windows, encode_pairs, sentence_scores, span_labels
from .configuration import PrunerConfig
from .segmentation import Sentence, segment

AutoConfig.register(PrunerConfig.model_type, PrunerConfig, exist_ok=True)

if importlib.util.find_spec("torch") is not None:
    from transformers import AutoModel

    from .modeling import PrunerModel, PrunerOutput, default_backbone_path

    AutoModel.register(PrunerConfig, PrunerModel, exist_ok=True)

__version__ = "0.1.0"
__all__ = [
    "IGNORE_INDEX",
    "PrunerConfig",
    "PrunerModel",
    "PrunerOutput",
    "Sentence",
    "Windows",
    "default_backbone_path",
    "encode_pairs",
    "segment",
    "sentence_scores",
    "span_labels",
]
