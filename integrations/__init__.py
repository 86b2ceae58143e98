"""Adapters for the frameworks RAG pipelines are built with. Each module imports its framework
and needs its extra: ``pip install "pruner-model[langchain]"`` (``llama-index``, ``haystack``,
``mcp``, ``ray``).

May import :mod:`pruner_model.core` and :mod:`pruner_model.inference`.
"""
