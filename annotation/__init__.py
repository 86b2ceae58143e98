"""Annotation: labeled records from gold QA data (``pruner data squad``, the offline source mix of
``pruner data mix``) and from an LLM behind any OpenAI-compatible endpoint (``pruner annotate``:
the prompt that fences passages as untrusted data, retries, cache, resume, the Batch API, agreement
with gold labels).

May import :mod:`pruner_model.core` only.
"""
