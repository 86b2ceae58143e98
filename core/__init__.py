"""The core every part shares: the config and model, segmentation with character spans,
char-span <-> token alignment, the one scoring path, score rules, records and precision. It
imports no other part."""
