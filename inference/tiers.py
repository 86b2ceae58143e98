"""Tiered compression, after selection: each middle-tier chunk (a run of adjacent units that
scored between ``summary_threshold`` and the threshold and fit the budget) is summarized, the
fact guard checks every summary, and the passage text is assembled in document order from the
verbatim spans and the marked summaries.

What a chunk becomes:

* its summary, when the summarizer gave one that keeps every fact of the chunk and is shorter;
* the chunk itself (verbatim), when the summary lost a fact or is not about the chunk
  (``guard_fallbacks``: :func:`~pruner_model.inference.summarize.missing_facts`,
  :func:`~pruner_model.inference.summarize.grounded`) or is no
  shorter (``not_shorter``): never worse than the plain pruner, never over the budget (the
  middle tier was packed at full length);
* nothing, when there is no summary (the endpoint is down or slow, or did not answer for it):
  the plain pruner's output, with ``stats.summary.error`` saying why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
from pruner_model.inference.results import (
    PassageResult,
    PruneResult,
    Span,
    SummaryPart,
    SummaryStats,
    join_pieces,
)
from pruner_model.inference.selection import merge_spans
from pruner_model.inference.settings import SelectionParams
from pruner_model.inference.summarize import SUMMARY_MARK, Summarizer, grounded, missing_facts

MIDDLE = "middle"  # a unit's tier between selection and summarization


def chunks_of(passage: PassageResult) -> list[tuple[int, int]]:
    """``(first, last)`` sentence indices of each run of adjacent middle-tier units."""
    runs: list[tuple[int, int]] = []
    for s in passage.sentences:
        if s.tier != MIDDLE:
            continue
        if runs and runs[-1][1] == s.index - 1:
            runs[-1] = (runs[-1][0], s.index)
        else:
            runs.append((s.index, s.index))
    return runs


def summarize_results(
    results: Sequence[PruneResult],
    params: Sequence[SelectionParams],
    summarizer: Summarizer,
    count: Callable[[list[str]], list[int]],
    timeout: float | None = None,
) -> list[PruneResult]:
    """Every middle-tier chunk of ``results`` (those whose ``params`` have ``summarize``) through
    one :meth:`Summarizer.summarize` call, then each result assembled (:func:`assemble`).
    ``count`` gives the token counts of texts (the unit counts' tokenizer)."""
    t0 = time.perf_counter()
    todo = [
        (ri, pi, a, b)
        for ri, (r, p) in enumerate(zip(results, params))
        if p.summarize
        for pi, passage in enumerate(r.passages)
        for a, b in chunks_of(passage)
    ]
    texts = [_chunk_text(results[ri].passages[pi], a, b) for ri, pi, a, b in todo]
    batch = summarizer.summarize(texts, timeout=timeout) if texts else None
    summaries = dict(zip(((ri, pi, a) for ri, pi, a, _ in todo), batch.summaries if batch else []))
    seconds = time.perf_counter() - t0
    # whole-number counts (cache hits, requests) go to the first tiered result; cost and time are shared
    first = next((k for k, p in enumerate(params) if p.summarize), None)
    out = []
    for ri, (r, p) in enumerate(zip(results, params)):
        if not p.summarize:
            out.append(r)
            continue
        mine = sum(1 for t in todo if t[0] == ri)
        share = mine / len(todo) if todo else 0.0
        shared = SummaryStats(
            cache_hits=batch.cache_hits if batch and ri == first else 0,
            calls=batch.calls if batch and ri == first else 0,
            cost=batch.cost * share if batch else 0.0,
            seconds=seconds * share,
            error=batch.error if batch and mine else None,
        )
        out.append(
            assemble(r, p, {(pi, a): s for (i, pi, a), s in summaries.items() if i == ri}, count, shared)
        )
    return out


def _chunk_text(passage: PassageResult, a: int, b: int) -> str:
    return passage.source_text[passage.sentences[a].start : passage.sentences[b].end]


def assemble(
    result: PruneResult,
    params: SelectionParams,
    summaries: dict[tuple[int, int], str | None],
    count: Callable[[list[str]], list[int]],
    spend: SummaryStats,
) -> PruneResult:
    """``result`` with its middle tier resolved: summaries where they pass the guard, the chunk
    verbatim where they do not, dropped where there is none; text and stats rebuilt."""
    acc = dict(chunks=0, summarized=0, guard_fallbacks=0, not_shorter=0, failed=0, tokens_in=0, tokens_out=0)
    passages = []
    for pi, p in enumerate(result.passages):
        tiers = {s.index: s.tier for s in p.sentences}
        parts: list[SummaryPart] = []
        for a, b in chunks_of(p):
            acc["chunks"] += 1
            text = _chunk_text(p, a, b)
            summary = summaries.get((pi, a))
            chunk_tokens = sum(s.tokens for s in p.sentences[a : b + 1])
            verdict = "dropped"
            if summary is None:
                acc["failed"] += 1
            elif missing_facts(text, summary, params.must_keep) or not grounded(text, summary):
                acc["guard_fallbacks"] += 1
                verdict = "verbatim"
            else:
                (n,) = count([SUMMARY_MARK + summary])
                if n >= chunk_tokens:
                    acc["not_shorter"] += 1
                    verdict = "verbatim"
                else:
                    verdict = "summarized"
                    acc["summarized"] += 1
                    acc["tokens_in"] += chunk_tokens
                    acc["tokens_out"] += n
                    parts.append(
                        SummaryPart(p.sentences[a].start, p.sentences[b].end, summary, chunk_tokens, n)
                    )
            for k in range(a, b + 1):
                tiers[k] = verdict
        sentences = tuple(
            replace(s, tier=tiers[s.index], kept=tiers[s.index] == "verbatim") for s in p.sentences
        )
        passages.append(_rebuilt(p, sentences, tuple(parts)))
    return _with_stats(
        result,
        params,
        tuple(passages),
        replace(spend, **acc),
    )


def _rebuilt(p: PassageResult, sentences, parts: tuple[SummaryPart, ...]) -> PassageResult:
    """The passage's spans (kept units merged, as the plain pruner's are) and text: verbatim spans
    and marked summaries in document order."""
    spans = merge_spans(
        np.array([s.start for s in sentences], dtype=np.int64),
        np.array([s.end for s in sentences], dtype=np.int64),
        np.array([s.score for s in sentences]),
        np.array([s.kept for s in sentences], dtype=bool),
    )
    pieces = sorted(
        [(a, b, p.source_text[a:b]) for a, b, _ in spans]
        + [(part.start, part.end, SUMMARY_MARK + part.text) for part in parts]
    )
    return replace(
        p,
        text=join_pieces(p.source_text, pieces),
        spans=tuple(Span(*sp) for sp in spans),
        sentences=sentences,
        summaries=parts,
    )


def _with_stats(result: PruneResult, params: SelectionParams, passages, summary: SummaryStats) -> PruneResult:
    st = result.stats
    verbatim = sum(s.tokens for p in passages for s in p.sentences if s.kept)
    tokens_out = verbatim + summary.tokens_out
    saved = st.tokens_in - tokens_out
    price = params.price_per_million_tokens
    stats = replace(
        st,
        tokens_out=tokens_out,
        compression=1.0 - tokens_out / st.tokens_in if st.tokens_in else 0.0,
        sentences_out=sum(s.kept for p in passages for s in p.sentences),
        tokens_saved=saved,
        cost_saved=None if price is None else saved / 1e6 * price - summary.cost,
        summary=summary,
    )
    text = "\n\n".join(p.text for p in passages if p.text)
    return replace(result, text=text, passages=passages, stats=stats)


def summarize_by_counter(
    results: Sequence[PruneResult],
    params: Sequence[SelectionParams],
    summarizer: Summarizer,
    counter_of: Callable,
    timeout: float | None = None,
) -> list[PruneResult]:
    """:func:`summarize_results` for results whose settings count tokens with different budget
    tokenizers: summaries are counted in the tokens their units were counted in
    (``counter_of(budget_tokenizer)``)."""
    out = list(results)
    keys = list(dict.fromkeys(p.budget_tokenizer for p in params if p.summarize))
    for key in keys:
        idx = [i for i, p in enumerate(params) if p.summarize and p.budget_tokenizer == key]
        done = summarize_results(
            [results[i] for i in idx], [params[i] for i in idx], summarizer, counter_of(key), timeout
        )
        for i, r in zip(idx, done):
            out[i] = r
    return out
