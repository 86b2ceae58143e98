"""Provence-style neural span pruner: model, segmentation and alignment shared by all parts."""

from transformers import AutoConfig, AutoModel

from .alignment import IGNORE_INDEX, Windows, encode_pairs, sentence_scores, span_labels
from .configuration import PrunerConfig
from .modeling import PrunerModel, PrunerOutput, default_backbone_path
from .segmentation import Sentence, segment

AutoConfig.register(PrunerConfig.model_type, PrunerConfig, exist_ok=True)
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
