"""The core every part shares: the config and model (:mod:`~pruner_model.core.modeling`, its
losses), segmentation with character spans, char-span <-> token alignment, the one scoring path,
score rules, the per-request threshold model and its request features, word and TF-IDF helpers,
records and precision.

May import no other part of the package.
"""
