"""Gold labels from a SQuAD-format QA file of your own (`pruner data squad --file`).

Each question becomes a group of passages: its gold paragraph (the sentence holding the answer
is relevant) and distractors, hard ones from the same article and easy ones from other articles;
a share of groups has no gold paragraph at all, so the model learns that pruning everything is
sometimes right. Groups are written twice: as labeled records (the training unit) and in the raw
grouped form ``{id, query, passages}`` that ``pruner annotate`` labels, for comparison with gold.

The public QA data sets (SQuAD, SQuADShifts new_wiki and the others of the pack) are read by
:mod:`.public_qa` into the retriever-style pool of `pruner data qa`; this module serves a user's
own SQuAD-format file, paragraph by paragraph.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path

from pruner_model.core.records import RecordError, read_text
from pruner_model.core.segmentation import segment

logger = logging.getLogger(__name__)


@dataclass
class Paragraph:
    pid: str
    article: int
    title: str
    context: str


@dataclass
class Question:
    qid: str
    query: str
    paragraph: int  # index into the paragraph list
    answers: list[tuple[int, int]]  # char spans of the answers in the paragraph


def load_squad(path: str | Path, split: str) -> tuple[list[Paragraph], list[Question]]:
    """Paragraphs and questions of a SQuAD-format JSON file."""
    try:
        data = json.loads(read_text(path))["data"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise RecordError(f"{path}: not a SQuAD-format JSON file (expected {{'data': [...]}})") from None
    paragraphs, questions = [], []
    for ai, article in enumerate(data):
        for pi, para in enumerate(article.get("paragraphs", [])):
            ctx = para.get("context", "")
            if not ctx.strip():
                continue
            idx = len(paragraphs)
            paragraphs.append(Paragraph(f"{split}:{ai}:{pi}", ai, str(article.get("title", "")), ctx))
            for qa in para.get("qas", []):
                spans = []
                for ans in qa.get("answers", []):
                    s = ans.get("answer_start")
                    t = ans.get("text", "")
                    if isinstance(s, int) and t and ctx[s : s + len(t)] == t:
                        spans.append((s, s + len(t)))
                if spans and qa.get("question", "").strip():
                    questions.append(
                        Question(str(qa.get("id", len(questions))), qa["question"].strip(), idx, spans)
                    )
    return paragraphs, questions


def answer_sentence_spans(context: str, answer: tuple[int, int]) -> list[list[int]]:
    """Spans of the units (sentences) that the answer span overlaps."""
    s, e = answer
    return [[u.start, u.end] for u in segment(context) if u.start < e and u.end > s]


# over 60 lines: one pass building every query's group with its distractors; the sampling state is shared
def build_groups(
    paragraphs: list[Paragraph],
    questions: list[Question],
    passages_per_group: int = 5,
    hard_distractors: int = 2,
    no_gold_share: float = 0.1,
    seed: int = 0,
    max_questions: int | None = None,
    all_answers: bool = False,
    mined_distractors: int = 0,
) -> tuple[list[dict], list[dict]]:
    """(labeled records, raw groups) for the questions, as described in the module docstring.

    The relevant spans of the gold paragraph are the sentences the first (reference) answer
    overlaps or, with ``all_answers``, the sentences any annotator's answer overlaps. About 8% of
    SQuAD questions have an alternative answer in another sentence: training labels take them
    all (a sentence holding a valid answer labeled irrelevant teaches the model to drop answers),
    while dev labels keep the reference answer (evidence preserved = its sentence is kept).

    ``mined_distractors`` of the easy distractors are replaced by the paragraphs of other
    articles nearest to the gold one by TF-IDF (what a retriever hands a pruner).
    """
    rng = random.Random(seed)
    by_article: dict[int, list[int]] = {}
    for i, p in enumerate(paragraphs):
        by_article.setdefault(p.article, []).append(i)
    qs = list(questions)
    rng.shuffle(qs)
    if max_questions is not None:
        qs = qs[:max_questions]
    seg_cache: dict[tuple, list[list[int]]] = {}
    records, groups = [], []
    n = len(paragraphs)
    index = articles = None
    if mined_distractors > 0:
        import numpy as np
        from pruner_model.core.retrieval import TfidfIndex

        index = TfidfIndex([p.context for p in paragraphs])
        articles = np.array([p.article for p in paragraphs])
    for q in qs:
        gold = q.paragraph
        article = paragraphs[gold].article
        same = [i for i in by_article[article] if i != gold]
        hard = rng.sample(same, min(hard_distractors, len(same)))
        easy: list[int] = []
        if index is not None:
            budget = max(0, min(mined_distractors, passages_per_group - 1 - len(hard)))
            easy = index.nearest(gold, budget, exclude=articles == article) if budget else []
        for _ in range(50 * passages_per_group):  # bounded: a corpus of one article has no easy ones
            if len(hard) + len(easy) >= passages_per_group:
                break
            i = rng.randrange(n)
            if paragraphs[i].article != article and i not in easy:
                easy.append(i)
        distractors = hard + easy
        has_gold = rng.random() >= no_gold_share
        members = (
            [gold, *distractors[: passages_per_group - 1]] if has_gold else distractors[:passages_per_group]
        )
        rng.shuffle(members)
        group_passages = []
        for i in members:
            p = paragraphs[i]
            if i == gold:
                spans = []
                for ans in q.answers if all_answers else q.answers[:1]:
                    key = (i, ans)
                    if key not in seg_cache:
                        seg_cache[key] = answer_sentence_spans(p.context, ans)
                    spans += [sp for sp in seg_cache[key] if sp not in spans]
                spans.sort()
            else:
                spans = []
            records.append(
                {
                    "id": f"{q.qid}/{p.pid}",
                    "query": q.query,
                    "title": p.title,
                    "context": p.context,
                    "relevant_spans": spans,
                    "source": "squad",
                    "meta": {
                        "gold": i == gold,
                        "hard": i in hard,
                        "answers": [list(a) for a in q.answers] if i == gold else [],
                    },
                }
            )
            group_passages.append({"id": p.pid, "title": p.title, "text": p.context})
        groups.append({"id": q.qid, "query": q.query, "passages": group_passages})
    return records, groups
