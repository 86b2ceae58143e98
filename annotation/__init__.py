"""Annotation: labeled records from gold QA data (``pruner data qa``: the public QA data sets in
their published formats as one retriever-style pool; ``pruner data squad``: SQuAD-format files of
your own) and from an LLM behind any OpenAI-compatible endpoint (``pruner annotate``:
the prompt that fences passages as untrusted data, retries, cache, resume, the Batch API, agreement
with gold labels); and, for ``pruner adapt --corpus``, a user's documents read and chunked, questions
written for them by the same endpoint, and their groups mined from the corpus.

May import :mod:`pruner_model.core` only.
"""
