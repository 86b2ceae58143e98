"""Adaptation: a checkpoint (or the bundled encoder) adapted to a user's own text in resumable
steps under one output folder, what `pruner adapt` runs.

- :mod:`~pruner_model.adaptation.pipeline`: the steps in order, each a function of one
  :class:`~pruner_model.adaptation.pipeline.Context`, and the one place that reads and writes
  their results (``adapt.json``, :class:`~pruner_model.training.adapt.AdaptState`);
- :mod:`~pruner_model.adaptation.corpus`: documents to chunks, questions, mined groups and LLM
  labels (``--corpus``);
- :mod:`~pruner_model.adaptation.mix`: the published weights blended with the checkpoint's within
  the forgetting allowance;
- :mod:`~pruner_model.adaptation.report`: the report split measured, and ``report.md`` from the
  template ``report.md`` beside it.

The splits, the fine-tuning config and the state file are :mod:`pruner_model.training.adapt`.

May import :mod:`pruner_model.core`, :mod:`pruner_model.evaluation`,
:mod:`pruner_model.annotation`, :mod:`pruner_model.training` and :mod:`pruner_model.inference`.
"""
