"""`ContextPruner`: score passages with the model, select sentences, return typed results."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

import numpy as np
from pruner_model.core.alignment import char_token_floor, count_tokens, unit_bounds
from pruner_model.core.configuration import PrunerConfig
from pruner_model.core.default_model import resolve_default
from pruner_model.core.request_features import request_features
from pruner_model.core.scoring import PairScores, score_pairs
from pruner_model.core.threshold_model import ThresholdModel
from pruner_model.inference.assembly import flat_units, passage_result, prune_stats, weighted_pairs
from pruner_model.inference.backends import Backend, TorchBackend
from pruner_model.inference.budget import token_counter
from pruner_model.inference.loading import load_backend, load_parts, settle_precision
from pruner_model.inference.requests import (
    PassageInput,
    PreparedPassage,
    PruneRequest,
    check_query,
    prepare_passages,
)
from pruner_model.inference.results import (
    PassageScores,
    PruneResult,
    RankedPassage,
    with_timings,
)
from pruner_model.inference.selection import (
    Units,
    middle_tier,
    must_keep_hits,
    select,
    uncertainty,
)
from pruner_model.inference.settings import MUST_KEEP_SECONDS, SelectionParams
from pruner_model.inference.summarize import check_summarizer
from pruner_model.inference.tiers import MIDDLE

_DEFAULT_PARAMS = SelectionParams()  # frozen: shared by every call that passes no params


class ContextPruner:
    """Prune retrieved passages down to the sentences a query needs.

    >>> pruner = ContextPruner.from_pretrained("runs/quickstart")  # doctest: +SKIP
    >>> result = pruner.prune("Who wrote Hamlet?", ["Hamlet is a tragedy by Shakespeare. ..."])
    >>> result.text, result.stats.compression  # doctest: +SKIP
    """

    def __init__(
        self, backend: Backend, tokenizer, config: PrunerConfig, batch_size: int = 32, summarizer=None
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.summarizer = check_summarizer(summarizer)  # the middle tier's, for summarize=True
        self.backend = backend
        self.tokenizer = tokenizer
        self.config = config
        self._threshold_model = None  # (the config's dict, its parsed ThresholdModel)
        self.batch_size = batch_size
        self.progress_above: int | None = None  # show a bar when one call scores more windows
        self.source: str | None = None  # the folder or hub id it was loaded from, if any
        self.precision_agreement: float | None = None  # bf16's with fp32, when from_pretrained chose

    @property
    def precision(self) -> str:
        """What the encoder runs in: ``"fp32"``, ``"bf16"``, ``"fp16"`` or ``"int8"`` (ONNX)."""
        return getattr(self.backend, "precision", "fp32")

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path | None = None,
        backend: Literal["auto", "torch", "onnx"] = "auto",
        device: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool = False,
        summarizer=None,
        **backend_kwargs,
    ) -> ContextPruner:
        """Load the shipped default model, a checkpoint folder, an ONNX export folder, or a hub
        repo id holding either (cached once; ``HF_HUB_OFFLINE=1`` uses the cache alone).

        Args:
            path: folder or ``"owner/name"`` repo id; None: ``pruner_model.DEFAULT_MODEL``.
            backend: ``"auto"`` (ONNX when the folder has ``model.onnx`` and no safetensors),
                ``"torch"`` or ``"onnx"``.
            device: ``"cpu"``, ``"cuda"`` or None for the best available.
            batch_size: windows per encoder call.
            show_progress_bar: show transformers' weight-loading bar (off: loading prints nothing).
            summarizer: a :class:`~pruner_model.inference.summarize.Summarizer` (e.g.
                ``OpenAISummarizer``) for ``prune(..., summarize=True)``.
            **backend_kwargs: ``quantized`` (an ONNX folder: ``True`` its int8 file, ``False`` its
                fp32 one; not given: int8 on a CPU when the export validated and kept it), ``dtype`` (torch: ``"fp32"``,
                ``"bf16"``, ``"auto"``). Without it: bf16 where native and agreeing with fp32 on
                the validation sentences (:func:`~pruner_model.inference.agreement.choose_precision`).

        Raises:
            FileNotFoundError: no checkpoint there.
        """
        path, config, tokenizer = load_parts(resolve_default(path))
        checked = "dtype" not in backend_kwargs  # no precision asked for: the fastest that agrees
        impl = load_backend(path, config, backend, device, show_progress_bar, **backend_kwargs)
        pruner = cls(impl, tokenizer, config, batch_size=batch_size, summarizer=summarizer)
        pruner.source = str(path)
        if checked:
            pruner.precision_agreement = settle_precision(pruner)
        return pruner

    @classmethod
    def from_model(cls, model, tokenizer, device: str | None = None, batch_size: int = 32):
        """Wrap an in-memory :class:`PrunerModel` (e.g. during training)."""
        return cls(TorchBackend(model, device=device), tokenizer, model.config, batch_size)

    # ------------------------------------------------------------------ public API
    def prune(
        self,
        query: str,
        passages: Sequence[PassageInput] | PassageInput,
        params: SelectionParams | None = None,
        **overrides,
    ) -> PruneResult:
        """Keep the sentences of ``passages`` that ``query`` needs.

        Args:
            query: the question the kept context must answer.
            passages: strings or ``{"id", "title", "text"}`` dicts (one passage alone is fine).
            params: selection settings; default ``SelectionParams()`` (the checkpoint's threshold).
            **overrides: any :class:`SelectionParams` field, e.g. ``token_budget=300``,
                ``neighbors=1``, ``must_keep=[r"E\\d{4}"]``, ``relative_floor=None``.

        Returns:
            A :class:`PruneResult`: ``text``, per-passage ``spans``/``sentences``/``relevance``,
            ``stats``.

        Raises:
            ValueError, TypeError: an empty query, a passage without text, a setting out of range.

        >>> result = pruner.prune("Who wrote Hamlet?", ["Hamlet is a tragedy by Shakespeare. ..."],
        ...                       token_budget=200)  # doctest: +SKIP
        """
        return self.prune_batch([(query, passages)], params, **overrides)[0]

    def prune_batch(
        self,
        items: Sequence[tuple[str, Sequence[PassageInput] | PassageInput]],
        params: SelectionParams | None = None,
        show_progress_bar: bool = False,
        queries_per_run: int = 64,
        **overrides,
    ) -> list[PruneResult]:
        """:meth:`prune` for many ``(query, passages)`` items with the same settings; the windows
        of ``queries_per_run`` queries at a time go through the encoder together.

        ``summarize`` may be a :class:`~pruner_model.inference.summarize.Summarizer` instead of
        True: it summarizes this call's middle tier (else the pruner's ``summarizer`` does)."""
        summarizer = self.summarizer
        if "summarize" in overrides and not isinstance(overrides["summarize"], bool | None):
            summarizer = check_summarizer(overrides["summarize"])
            overrides["summarize"] = True
        p = self.selection_params(params, **overrides)
        if p.summarize and summarizer is None:
            raise ValueError(
                "summarize=True needs a summarizer: prune(..., summarize=OpenAISummarizer(model=..., "
                "base_url=...)) or ContextPruner.from_pretrained(..., summarizer=...)"
            )
        results: list[PruneResult] = []
        bar = None
        if show_progress_bar:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(items), desc="pruning", unit="query")
        try:
            for b in range(0, len(items), max(1, queries_per_run)):
                chunk = items[b : b + max(1, queries_per_run)]
                ran = self.run([PruneRequest(q, ps, p) for q, ps in chunk])
                results += self.summarize(ran, [p] * len(ran), summarizer) if p.summarize else ran
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
        return results

    def selection_params(self, params: SelectionParams | None = None, **overrides) -> SelectionParams:
        """``params`` (default ``SelectionParams()``) with ``overrides``, the threshold and relative
        floor resolved to the checkpoint's calibrated ones where not given."""
        p = params or _DEFAULT_PARAMS
        return (p.replace(**overrides) if overrides else p).resolve(self.config)

    def score(self, query: str, passages: Sequence[PassageInput] | PassageInput) -> PassageScores:
        """Sentence scores and passage relevance, no selection.

        Returns:
            :class:`PassageScores`: ``sentence_scores[i]`` (numpy, one score per unit of passage
            ``i``, as the threshold sees them before relative scaling), ``relevance`` (numpy,
            one probability per passage) and the ``units`` they score.
        """
        query, prepared = self._prepare(PruneRequest(query, passages, _DEFAULT_PARAMS))
        scored, _ = self._score([query] * len(prepared), prepared)
        return PassageScores(
            [s.scores for s in self._weighted(scored)],
            np.array([s.relevance for s in scored]),
            [p.units for p in prepared],
        )

    def rank(
        self, query: str, passages: Sequence[PassageInput] | PassageInput, top_k: int | None = None
    ) -> list[RankedPassage]:
        """Passages ordered by the relevance head, best first (a reranker in the same pass).

        Args:
            top_k: keep only the ``top_k`` best (default: all).
        """
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
            raise ValueError(f"top_k must be a whole number >= 0, got {top_k!r}")
        query, prepared = self._prepare(PruneRequest(query, passages, _DEFAULT_PARAMS))  # segmented once
        scored, _ = self._score([query] * len(prepared), prepared)
        rel = np.array([s.relevance for s in scored])
        order = np.argsort(-rel, kind="stable")[:top_k]
        return [RankedPassage(int(i), prepared[i].id, float(rel[i])) for i in order]

    def run(self, requests: Sequence[PruneRequest]) -> list[PruneResult]:
        """Requests with their own selection settings, scored together through the encoder
        (the HTTP server's micro-batches go through here)."""
        if not requests:
            return []
        t0 = time.perf_counter()
        prepared = [(r.query, r.prepared) if r.prepared is not None else self._prepare(r) for r in requests]
        pairs = [(qi, pi) for qi, (_, ps) in enumerate(prepared) for pi, p in enumerate(ps) if p.units]
        # identical (query, passage) pairs (one query pruned under several settings, a passage
        # repeated by the retriever) go through the encoder once
        unique: dict[tuple[str, str], int] = {}  # (query, text) -> index into distinct
        distinct: list[tuple[int, int]] = []  # the first pair of each (query, text)
        slot = []  # pair -> index into distinct
        for qi, pi in pairs:
            key = (prepared[qi][0], prepared[qi][1][pi].text)
            if key not in unique:
                unique[key] = len(distinct)
                distinct.append((qi, pi))
            slot.append(unique[key])
        scored, encoder_seconds = self._score(
            [prepared[qi][0] for qi, _ in distinct],
            [prepared[qi][1][pi] for qi, pi in distinct],
        )
        by_pair = {pair: scored[u] for pair, u in zip(pairs, slot)}
        tokens_per_query = np.zeros(len(requests))
        for (qi, _), u in zip(pairs, slot):
            tokens_per_query[qi] += scored[u].window_tokens
        results = [
            self._select(
                query, passages, qi, by_pair, self.selection_params(requests[qi].params), requests[qi].forced
            )
            for qi, (query, passages) in enumerate(prepared)
        ]
        total = time.perf_counter() - t0
        post = max(total - encoder_seconds, 0.0)
        n_tok = tokens_per_query.sum()
        shares = tokens_per_query / n_tok if n_tok else np.full(len(requests), 1 / len(requests))
        return [with_timings(r, float(encoder_seconds * s), float(post * s)) for r, s in zip(results, shares)]

    def summarize(
        self,
        results: Sequence[PruneResult],
        params: Sequence[SelectionParams],
        summarizer=None,
        timeout: float | None = None,
    ) -> list[PruneResult]:
        """The middle tier of :meth:`run`'s ``results`` (those whose resolved ``params`` have
        ``summarize``) summarized, guarded and assembled (:mod:`pruner_model.inference.tiers`);
        a failing summarizer leaves the plain pruner's output and says why in
        ``stats.summary.error``. ``timeout``: seconds for all the summarizer's requests."""
        from pruner_model.inference.tiers import summarize_by_counter

        summarizer = summarizer or self.summarizer
        if summarizer is None:
            raise ValueError("summarize=True needs a summarizer (ContextPruner(..., summarizer=...))")
        return summarize_by_counter(results, params, summarizer, self._counter, timeout)

    def _counter(self, budget_tokenizer):
        """Token counts of texts as the units were counted: the budget tokenizer's, or the
        pruner's own (with its long-word weighting)."""
        counter = token_counter(budget_tokenizer)
        if counter is None:
            return lambda texts: [count_tokens(self.tokenizer, [t]) for t in texts]
        return lambda texts: [int(n) for n in counter(texts)]

    def prepare(self, request: PruneRequest, must_keep_deadline: float | None = None) -> PruneRequest:
        """Check and segment a request's query and passages now (raises ValueError/TypeError on bad
        input), so a batch of prepared requests cannot fail on one request's text; its ``must_keep``
        patterns are matched now too, by ``must_keep_deadline`` (a ``time.monotonic()`` instant that
        the queries of one HTTP request share; default: the one-call budget from now), so pattern
        matching never holds the encoder's batcher."""
        _, passages = self._prepare(request)
        forced = None
        if request.params.must_keep:
            deadline = (
                time.monotonic() + MUST_KEEP_SECONDS if must_keep_deadline is None else must_keep_deadline
            )
            texts = [u.text_of(p.text) for p in passages for u in p.units]
            forced = must_keep_hits(texts, request.params.must_keep, deadline)
        return replace(request, prepared=passages, forced=forced)

    def keep_masks(
        self, items: Sequence[tuple[str, Sequence[PassageInput]]], settings: Sequence[SelectionParams]
    ) -> list[list[np.ndarray]]:
        """The keep/drop decision of every unit of each ``(query, passages)`` under each of
        ``settings``: ``masks[k][i]`` for setting ``k`` and item ``i``, units in passage order.
        Every setting of a query rides in one run, so the encoder sees each query once."""
        masks: list[list[np.ndarray]] = [[] for _ in settings]
        step = max(1, self.batch_size // 2)
        for b in range(0, len(items), step):
            chunk = items[b : b + step]
            results = self.run([PruneRequest(q, ps, sp) for sp in settings for q, ps in chunk])
            for k in range(len(settings)):
                for r in results[k * len(chunk) : (k + 1) * len(chunk)]:
                    kept = [np.array([s.kept for s in p.sentences], dtype=bool) for p in r.passages]
                    masks[k].append(np.concatenate(kept) if kept else np.zeros(0, dtype=bool))
        return masks

    # ------------------------------------------------------------------ steps
    def _prepare(self, request: PruneRequest) -> tuple[str, list[PreparedPassage]]:
        cfg = self.config
        passages = prepare_passages(
            request.passages, request.params.language, cfg.segmenter_structure, cfg.segmenter_language
        )
        return check_query(request.query), passages

    def _score(self, queries: list[str], passages: list[PreparedPassage]) -> tuple[list[PairScores], float]:
        """Every (query, passage) pair through the one scoring path: the token head's sentence
        scores and the passage relevance (weighted per request by :meth:`_weighted`)."""
        out = score_pairs(
            self.backend,
            self.tokenizer,
            self.config,
            queries,
            [p.text for p in passages],
            [unit_bounds(p.units) for p in passages],
            self.backend.input_names,
            self.batch_size,
            self.progress_above,
        )
        for pair, passage in zip(out.pairs, passages):
            if (
                not passage.units
            ):  # empty or whitespace: nothing to be relevant (the head scores the query alone)
                pair.relevance = 0.0
        return out.pairs, out.encoder_seconds

    def _weighted(self, pairs: list[PairScores | None]) -> list[PairScores | None]:
        return weighted_pairs(pairs, self.config.relevance_exponent, self.config.relevance_contrast)

    def _select(self, query, passages, qi, by_pair, params: SelectionParams, forced=None) -> PruneResult:
        """Selection over the units of one query's passages, then the typed result."""
        pairs = self._weighted([by_pair.get((qi, pi)) for pi in range(len(passages))])
        units, starts, ends = flat_units(passages, pairs)
        params, unfamiliar = self._request_params(query, units, params)
        counter = token_counter(params.budget_tokenizer)
        if counter is not None:  # budgets and counts in the generator's tokens
            units.tokens = counter(units.texts)
        # characters a tokenizer drops (zero-width, combining, controls) still count: a budget
        # bounds the characters returned as well as the tokens
        units.tokens = np.maximum(units.tokens, char_token_floor(units.texts))
        keep, removed = select(units, params, forced)
        confidence, uncertain = uncertainty(units, params.uncertain_below)
        tiers = None
        if params.summarize:  # verbatim = what the plain pruner keeps; the middle tier is resolved later
            tiers = np.where(keep, "verbatim", "dropped").astype(object)
            tiers[middle_tier(units, keep, params)] = MIDDLE
        results = [passage_result(p, units, keep, starts, ends, pi, tiers) for pi, p in enumerate(passages)]
        stats = prune_stats(units, keep, removed, confidence, uncertain, params, unfamiliar)
        text = "\n\n".join(r.text for r in results if r.text)
        return PruneResult(query, text, tuple(results), stats, params.threshold)

    def _request_params(self, query: str, units: Units, params: SelectionParams):
        """``params`` with the threshold model's threshold and gate if left to it, and its unfamiliar flag."""
        if params.threshold is not None:
            return params, False
        tm = self.config.threshold_model
        if self._threshold_model is None or self._threshold_model[0] is not tm:
            self._threshold_model = (tm, ThresholdModel.from_dict(tm))
        model = self._threshold_model[1]
        feats = request_features(
            query, units.texts, units.passage, units.scores, self.config.relative_floor, units.relevance
        )
        threshold, unfamiliar = model.request(feats)
        return params.with_request_threshold(threshold, model.gate(unfamiliar)), unfamiliar
