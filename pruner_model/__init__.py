"""Provence-style neural span pruner: cut retrieved passages to the sentences a query needs.

The one import root of the package::

    from pruner_model import ContextPruner, PruneResult, PrunerConfig, PrunerModel

This folder is the package root only (the public API and the ``pruner`` command). Every part is
a sibling folder of the repository installed inside it the same way: :mod:`pruner_model.core`
(config, model, segmentation, alignment, scoring, records, precision),
:mod:`pruner_model.evaluation` (groups, metrics, statistics, calibration, shifted slices),
:mod:`pruner_model.annotation`, :mod:`pruner_model.training`, :mod:`pruner_model.inference` and
the framework adapters in :mod:`pruner_model.integrations`. Names that need torch (``PrunerModel``) or the inference part
(``ContextPruner``, result types) load on first use, so a torch-free ONNX serving install can
import this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Every public name loads on first use: ``import pruner_model`` imports neither transformers nor
# torch nor nltk (and, through nltk, scipy). ``PrunerConfig`` registers itself with
# ``AutoConfig`` when it loads and ``PrunerModel`` with ``AutoModel``; to load a checkpoint with
# ``AutoModel.from_pretrained``, touch ``pruner_model.PrunerModel`` first.
_LAZY = {
    "DEFAULT_MODEL": "pruner_model.core.default_model",  # the folder of the shipped default model
    "IGNORE_INDEX": "pruner_model.core.alignment",
    "Windows": "pruner_model.core.alignment",
    "encode_pairs": "pruner_model.core.alignment",
    "sentence_scores": "pruner_model.core.alignment",
    "span_labels": "pruner_model.core.alignment",
    "PrunerConfig": "pruner_model.core.configuration",
    "Unit": "pruner_model.core.segmentation",
    "segment": "pruner_model.core.segmentation",
    "PrunerModel": "pruner_model.core.modeling",
    "PrunerOutput": "pruner_model.core.modeling",
    "default_backbone_path": "pruner_model.core.modeling",
    "ContextPruner": "pruner_model.inference.pruner",
    "PruneResult": "pruner_model.inference.results",
    "PassageResult": "pruner_model.inference.results",
    "SentenceResult": "pruner_model.inference.results",
    "PruneStats": "pruner_model.inference.results",
    "Span": "pruner_model.inference.results",
    "SelectionParams": "pruner_model.inference.settings",
}

if TYPE_CHECKING:
    from pruner_model.core.alignment import IGNORE_INDEX, Windows, encode_pairs, sentence_scores, span_labels
    from pruner_model.core.configuration import PrunerConfig
    from pruner_model.core.default_model import DEFAULT_MODEL
    from pruner_model.core.modeling import PrunerModel, PrunerOutput, default_backbone_path
    from pruner_model.core.segmentation import Unit, segment
    from pruner_model.inference.pruner import ContextPruner
    from pruner_model.inference.results import PassageResult, PruneResult, PruneStats, SentenceResult, Span
    from pruner_model.inference.settings import SelectionParams


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pruner_model' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "DEFAULT_MODEL",
    "IGNORE_INDEX",
    "ContextPruner",
    "PassageResult",
    "PruneResult",
    "PruneStats",
    "PrunerConfig",
    "PrunerModel",
    "PrunerOutput",
    "SelectionParams",
    "SentenceResult",
    "Span",
    "Unit",
    "Windows",
    "default_backbone_path",
    "encode_pairs",
    "segment",
    "sentence_scores",
    "span_labels",
]
