"""What one request shows before anything is kept: a fixed vector of features of its question,
its passages' style and its score profile, from which a checkpoint's threshold model predicts the
threshold this request needs (:mod:`pruner_model.core.threshold_model`).

Calibration (on labeled groups) and inference (on a request's units) call :func:`request_features`
with the same arrays, so a threshold is predicted from the same numbers in both places. Every
feature is cheap: word counts over the unit texts and order statistics of the unit scores, well
under a millisecond for a 5-passage request.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from pruner_model.core.score_rules import relative_scores
from pruner_model.core.text import STOP_WORDS, words

WH = ("who", "what", "when", "where", "why", "how", "which")
YES_NO = frozenset("is are was were do does did can could will would should has have had".split())
PRONOUNS = frozenset("he she him her his hers they them their theirs i me my we us our you your".split())
_QUOTE = re.compile(r"[\"“”‘’']")
_FLOOR = 1e-6  # log10 of a score under this reads as -6: a sentence the rule calls absent

FEATURES = (
    # the score profile, on the scale the threshold is compared with (relative to the best unit)
    "second_score",
    "third_score",
    "fifth_score",
    "share_over_0.1",
    "share_over_0.01",
    "share_over_0.001",
    "best_raw_score",
    # the relevance head: how sure it is of the best passage, and how far the others are behind
    "best_relevance",
    "relevance_gap",
    "best_passage_share",
    # the question's form
    *(f"wh_{w}" for w in WH),
    "yes_no",
    "query_words",
    "question_mark",
    "lowercase_query",
    # the passages' style
    "pronoun_share",
    "quote_share",
    "digit_share",
    "unit_words",
    "units",
    # lexical evidence: the unit sharing most of the question's content words, and its score
    "best_overlap",
    "overlap_unit_score",
)


def _log10(x: float) -> float:
    return float(np.log10(max(float(x), _FLOOR)))


def _logit(p: float) -> float:
    p = min(max(float(p), 1e-6), 1.0 - 1e-6)
    return float(np.log(p / (1.0 - p)))


def _score_profile(rule_scores: np.ndarray, scores: np.ndarray, relevance, passage) -> list[float]:
    """How the scores fall off from the best unit, the best raw score, the relevance head's best
    probability and its gap to the second, the best passage's share of the units."""
    rule = np.sort(rule_scores)[::-1]
    n = len(rule)

    def nth(k: int) -> float:
        return _log10(rule[k]) if n > k else np.log10(_FLOOR)

    rel = np.sort(relevance)[::-1]
    best_passage = int(passage[int(np.argmax(rule_scores))]) if n else 0
    return [
        nth(1),
        nth(2),
        nth(4),
        float(np.mean(rule >= 0.1)) if n else 0.0,
        float(np.mean(rule >= 0.01)) if n else 0.0,
        float(np.mean(rule >= 0.001)) if n else 0.0,
        _log10(np.max(scores)) if n else np.log10(_FLOOR),
        _logit(rel[0]) if len(rel) else 0.0,
        _logit(rel[0]) - _logit(rel[1]) if len(rel) > 1 else 0.0,
        float(np.mean(passage == best_passage)) if n else 0.0,
    ]


def _question_form(query: str, q_words: list[str]) -> list[float]:
    """The question word, yes/no form, length, question mark and case of the query."""
    first = q_words[0] if q_words else ""
    return [
        *(float(w in q_words[:3]) for w in WH),
        float(first in YES_NO),
        float(np.log1p(len(q_words))),
        float(query.rstrip().endswith("?")),
        float(query[:1].islower()),
    ]


def _passage_style(texts: Sequence[str], unit_words: list[list[str]]) -> list[float]:
    """Pronoun, quote and digit shares, words a unit and the number of units."""
    all_words = [w for ws in unit_words for w in ws]
    n_words = max(len(all_words), 1)
    chars = "".join(texts)
    n = len(texts)
    return [
        sum(w in PRONOUNS for w in all_words) / n_words,
        len(_QUOTE.findall(chars)) / n_words,
        sum(c.isdigit() for c in chars) / max(len(chars), 1),
        float(np.log1p(n_words / max(n, 1))),
        float(np.log1p(n)),
    ]


def _best_overlap(q_words: list[str], unit_words: list[list[str]], rule_scores: np.ndarray) -> list[float]:
    """The best share of the query's content words a unit holds, and that unit's score."""
    q_content = {w for w in q_words if w not in STOP_WORDS}
    overlaps = [len(q_content & set(ws)) / len(q_content) if q_content else 0.0 for ws in unit_words]
    over = int(np.argmax(overlaps)) if overlaps else -1
    return [
        overlaps[over] if overlaps else 0.0,
        _log10(rule_scores[over]) if over >= 0 else np.log10(_FLOOR),
    ]


def request_features(
    query: str,
    texts: Sequence[str],
    passage: np.ndarray,
    scores: np.ndarray,
    relative_floor: float | None,
    relevance: np.ndarray,
) -> np.ndarray:
    """The :data:`FEATURES` of one request, in that order.

    Args:
        query: the question.
        texts: every unit's text, all passages flattened in order.
        passage: ``[n]`` the passage index of each unit.
        scores: ``[n]`` the sentence scores weighted by passage relevance as the checkpoint's
            score rule says (what selection holds before the relative floor).
        relative_floor: the checkpoint's relative floor: the features see the scores the
            threshold is compared with (:func:`relative_scores`).
        relevance: ``[n_passages]`` each passage's relevance probability.
    """
    rule_scores = relative_scores(scores, relative_floor)
    q_words = words(query)
    unit_words = [words(t) for t in texts]
    out = [
        *_score_profile(rule_scores, scores, np.asarray(relevance, dtype=np.float64), np.asarray(passage)),
        *_question_form(query, q_words),
        *_passage_style(texts, unit_words),
        *_best_overlap(q_words, unit_words, rule_scores),
    ]
    return np.asarray(out, dtype=np.float64)
