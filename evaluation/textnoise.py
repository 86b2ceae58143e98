"""Text as users write it: lower case, thin punctuation, light typos, with every character offset
mapped, so labeled spans survive the rewrite. Used to augment training records and to build the
``noisy`` evaluation slice."""

from __future__ import annotations

import random

import numpy as np

PUNCTUATION = frozenset(".,;:!?'\"()-")


def noisy_text(
    text: str, rng: random.Random, drop_punct: float = 0.5, typo: float = 0.03
) -> tuple[str, np.ndarray]:
    """``text`` lower-cased, each punctuation mark dropped with probability ``drop_punct``, and
    a typo (two adjacent letters swapped, or a letter dropped) at a letter with probability
    ``typo``; with the new offset of every old offset ``0..len(text)``.

    >>> noisy_text("Hello, World.", random.Random(0), drop_punct=1.0, typo=0.0)[0]
    'hello world'
    """
    out: list[str] = []
    new_at = np.zeros(len(text) + 1, dtype=np.int64)
    i = 0
    while i < len(text):
        new_at[i] = len(out)
        c = text[i].lower()
        if c in PUNCTUATION and rng.random() < drop_punct:
            i += 1
            continue
        nxt = text[i + 1].lower() if i + 1 < len(text) else ""
        if c.isalpha() and nxt.isalpha() and rng.random() < typo:
            if rng.random() < 0.5:  # swap two adjacent letters
                out += [nxt, c]
                new_at[i + 1] = len(out) - 1
                i += 2
            else:  # drop this letter
                i += 1
            continue
        out.append(c)
        i += 1
    new_at[len(text)] = len(out)
    return "".join(out), new_at


def noisy_record(record: dict, rng: random.Random) -> dict:
    """A labeled record rewritten by :func:`noisy_text` (query lower-cased), spans mapped."""
    text, new_at = noisy_text(record["context"], rng)
    spans = []
    for s, e in record["relevant_spans"]:
        a, b = int(new_at[s]), int(new_at[e])
        if b > a:
            spans.append([a, b])
    return {**record, "query": record["query"].lower(), "context": text, "relevant_spans": spans}
