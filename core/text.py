"""Words and content words: the one word definition that annotation, evaluation and the
request features share (every part may import it; it imports nothing of ours)."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    """Lower-cased ``\\w+`` words: the one word definition of every word count and baseline."""
    return [w.lower() for w in _WORD.findall(text)]


STOP_WORDS = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being it its this that "
    "these those there their they them he she his her we our you your i me my what which who whom whose when "
    "where why how do does did done not no so than then too very can could should would will shall may might "
    "must have has had into about over under after before between during also just only such any some all "
    "each both more most other".split()
)


def content_words(text: str) -> set[str]:
    """:func:`words` less English stop words."""
    return {w for w in words(text) if w not in STOP_WORDS}
