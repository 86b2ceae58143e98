"""`ContextPruner`: score passages with the model, select sentences, return typed results."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from pruner_model import PrunerConfig, encode_pairs, segment, sentence_scores
from pruner_model.alignment import unit_bounds
from pruner_model.metrics import relevance_weighted
from pruner_model.segmentation import Sentence as Unit

from .backends import Backend, TorchBackend
from .results import PassageResult, PruneResult, PruneStats, Sentence, Span
from .selection import SelectionParams, Units, merge_spans, select

PassageInput = str | Mapping[str, str]


@dataclass
class PruneRequest:
    """One query with its passages and its own selection settings."""

    query: str
    passages: Sequence[PassageInput] | PassageInput
    params: SelectionParams


@dataclass
class _Passage:
    id: str
    title: str | None
    text: str
    units: list[Unit]


@dataclass
class _Scored:
    """Model output for one (query, passage) pair, gathered from all its windows."""

    scores: np.ndarray  # [n_units]
    tokens: np.ndarray  # [n_units]
    relevance: float


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _is_onnx_folder(path: Path) -> bool:
    return (path / "model.onnx").exists() and not (path / "model.safetensors").exists()


class ContextPruner:
    """Prune retrieved passages down to the sentences a query needs.

    >>> pruner = ContextPruner.from_pretrained("runs/quickstart")  # doctest: +SKIP
    >>> result = pruner.prune("Who wrote Hamlet?", ["Hamlet is a tragedy by Shakespeare. ..."])
    >>> result.text, result.stats.compression  # doctest: +SKIP
    """

    def __init__(self, backend: Backend, tokenizer, config: PrunerConfig, batch_size: int = 32):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.backend = backend
        self.tokenizer = tokenizer
        self.config = config
        self.batch_size = batch_size

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        backend: Literal["auto", "torch", "onnx"] = "auto",
        device: str | None = None,
        batch_size: int = 32,
        **backend_kwargs,
    ) -> ContextPruner:
        """Load a checkpoint folder (``save_pretrained`` output) or an ONNX export folder."""
        from transformers import AutoTokenizer

        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"no pruner checkpoint at {path} (config.json missing)")
        config = PrunerConfig.from_pretrained(str(path))
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        if backend == "auto":
            backend = "onnx" if _is_onnx_folder(path) else "torch"
        if backend == "torch":
            if not (path / "model.safetensors").is_file():
                raise FileNotFoundError(f"no model.safetensors in {path}")
            if backend_kwargs.pop("quantized", False):
                raise ValueError(
                    f"{path} is a torch checkpoint; int8 needs an ONNX export "
                    f"(pruner export --model {path} --output DIR --quantize int8)"
                )
            impl: Backend = TorchBackend.from_pretrained(path, device=device, **backend_kwargs)
        elif backend == "onnx":
            from .onnx_backend import OnnxBackend

            impl = OnnxBackend.from_pretrained(path, device=device, **backend_kwargs)
        else:
            raise ValueError(f"backend must be 'auto', 'torch' or 'onnx', got {backend!r}")
        return cls(impl, tokenizer, config, batch_size=batch_size)

    @classmethod
    def from_model(cls, model, tokenizer, device: str | None = None, batch_size: int = 32):
        """Wrap an in-memory :class:`PrunerModel` (e.g. during training)."""
        return cls(TorchBackend(model, device=device), tokenizer, model.config, batch_size)

    # ------------------------------------------------------------------ public API
    def prune(
        self,
        query: str,
        passages: Sequence[PassageInput] | PassageInput,
        threshold: float | None = None,
        token_budget: int | None = None,
        neighbors: int = 0,
        keep_top: int = 0,
        *,
        min_relevance: float | None = None,
        per_passage_budget: int | None = None,
        keep_headings: bool = True,
        dedup: bool = True,
    ) -> PruneResult:
        """Keep the sentences of ``passages`` that ``query`` needs.

        ``threshold`` defaults to the checkpoint's calibrated one; ``token_budget`` caps the kept
        tokens over all passages (best sentences first, document order restored); ``neighbors``
        adds ±n sentences of the same paragraph around each kept one; ``keep_top`` keeps the k
        best sentences whatever their score; ``min_relevance`` drops passages whose relevance
        probability is lower. When the checkpoint has a ``relative_floor`` (set by calibration),
        the threshold applies to each score divided by ``max(relative_floor, best score among
        these passages)``; set ``pruner.config.relative_floor = None`` for absolute scores. A
        checkpoint with a ``relevance_exponent`` e > 0 scores each sentence as its token-head score
        times its passage's relevance probability ** e.
        """
        return self.prune_batch(
            [(query, passages)],
            threshold=threshold,
            token_budget=token_budget,
            neighbors=neighbors,
            keep_top=keep_top,
            min_relevance=min_relevance,
            per_passage_budget=per_passage_budget,
            keep_headings=keep_headings,
            dedup=dedup,
        )[0]

    def prune_batch(
        self,
        items: Sequence[tuple[str, Sequence[PassageInput] | PassageInput]],
        threshold: float | None = None,
        token_budget: int | None = None,
        neighbors: int = 0,
        keep_top: int = 0,
        *,
        min_relevance: float | None = None,
        per_passage_budget: int | None = None,
        keep_headings: bool = True,
        dedup: bool = True,
    ) -> list[PruneResult]:
        """:meth:`prune` for many queries; all windows go through the encoder together."""
        params = self.selection_params(
            threshold=threshold,
            token_budget=token_budget,
            neighbors=neighbors,
            keep_top=keep_top,
            min_relevance=min_relevance,
            per_passage_budget=per_passage_budget,
            keep_headings=keep_headings,
            dedup=dedup,
        )
        return self.run([PruneRequest(q, ps, params) for q, ps in items])

    def selection_params(self, threshold: float | None = None, **kwargs) -> SelectionParams:
        """Selection settings, the threshold (and relative floor) defaulting to the checkpoint's
        calibrated ones."""
        kwargs.setdefault("relative_floor", getattr(self.config, "relative_floor", None))
        return SelectionParams(
            threshold=self.config.threshold if threshold is None else float(threshold), **kwargs
        )

    def run(self, requests: Sequence[PruneRequest]) -> list[PruneResult]:
        """Requests with their own selection settings, scored together through the encoder
        (the HTTP server's micro-batches go through here)."""
        if not requests:
            return []
        t0 = time.perf_counter()
        prepared = [(self._check_query(r.query), self._prepare_passages(r.passages)) for r in requests]
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
        scored, encoder_seconds, pair_tokens = self._score(
            [prepared[qi][0] for qi, _ in distinct],
            [prepared[qi][1][pi] for qi, pi in distinct],
        )
        by_pair = {pair: scored[u] for pair, u in zip(pairs, slot)}
        tokens_per_query = np.zeros(len(requests))
        for (qi, _), u in zip(pairs, slot):
            tokens_per_query[qi] += pair_tokens[u]
        results = [
            self._select(query, passages, qi, by_pair, requests[qi].params)
            for qi, (query, passages) in enumerate(prepared)
        ]
        total = time.perf_counter() - t0
        post = max(total - encoder_seconds, 0.0)
        n_tok = tokens_per_query.sum()
        shares = tokens_per_query / n_tok if n_tok else np.full(len(requests), 1 / len(requests))
        return [
            _with_timings(r, float(encoder_seconds * s), float(post * s)) for r, s in zip(results, shares)
        ]

    # ------------------------------------------------------------------ steps
    @staticmethod
    def _check_query(query) -> str:
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, got {type(query).__name__}")
        if not query.strip():
            raise ValueError("query is empty")
        return query

    def _prepare_passages(self, passages) -> list[_Passage]:
        if isinstance(passages, str | Mapping):
            passages = [passages]
        out = []
        for i, p in enumerate(passages):
            if isinstance(p, str):
                pid, title, text = str(i), None, p
            elif isinstance(p, Mapping):
                if not isinstance(p.get("text"), str):
                    raise ValueError(f"passage {i} has no 'text' string")
                pid, title, text = str(p.get("id", i)), p.get("title"), p["text"]
            else:
                raise TypeError(f"passage {i} must be a string or a dict with 'text'")
            units = segment(text, self.config.segmenter_language, self.config.segmenter_structure)
            out.append(_Passage(pid, title, text, units))
        return out

    def _score(self, queries: list[str], passages: list[_Passage]):
        """Run every window of every pair through the backend, longest-first batches."""
        cfg = self.config
        windows = encode_pairs(
            self.tokenizer,
            queries,
            [p.text for p in passages],
            cfg.max_length,
            cfg.stride,
            cfg.max_query_length,
        )
        names = [n for n in self.backend.input_names if n in windows.features]
        pad_id = self.tokenizer.pad_token_id or 0
        probs: list[np.ndarray] = [None] * len(windows)  # type: ignore[list-item]
        rel = np.zeros(len(windows))
        order = np.argsort(-windows.lengths, kind="stable")
        encoder_seconds = 0.0
        for b in range(0, len(order), self.batch_size):
            idx = order[b : b + self.batch_size]
            width = int(windows.lengths[idx].max())
            batch = {}
            for name in names:
                arr = np.full((len(idx), width), pad_id if name == "input_ids" else 0, np.int64)
                for row, w in enumerate(idx):
                    seq = windows.features[name][w]
                    arr[row, : len(seq)] = seq
                batch[name] = arr
            t = time.perf_counter()
            token_logits, relevance_logits = self.backend(batch)
            encoder_seconds += time.perf_counter() - t
            token_probs = _sigmoid(token_logits)
            rel[idx] = _sigmoid(relevance_logits)
            for row, w in enumerate(idx):
                probs[w] = token_probs[row, : windows.lengths[w]]
        scored, pair_tokens = [], []
        for i, p in enumerate(passages):
            ws = windows.windows_of(i)
            starts, ends = unit_bounds(p.units)
            s, n = sentence_scores([probs[w] for w in ws], [windows.offsets[w] for w in ws], starts, ends)
            relevance = float(rel[ws].max()) if len(ws) else 0.0
            s = relevance_weighted(s, relevance, cfg.relevance_exponent)
            scored.append(_Scored(s, n, relevance))
            pair_tokens.append(int(windows.lengths[ws].sum()))
        return scored, encoder_seconds, pair_tokens

    def _select(self, query, passages, qi, by_pair, params: SelectionParams) -> PruneResult:
        scores, passage_ix, paragraph, heading, tokens, texts, starts, ends = ([] for _ in range(8))
        relevance = np.zeros(len(passages))
        offset = 0
        for pi, p in enumerate(passages):
            sc = by_pair.get((qi, pi))
            if sc is None:  # empty passage
                continue
            relevance[pi] = sc.relevance
            for k, u in enumerate(p.units):
                scores.append(sc.scores[k])
                tokens.append(sc.tokens[k])
                passage_ix.append(pi)
                paragraph.append(u.paragraph)
                heading.append(-1 if u.heading is None else offset + u.heading)
                texts.append(p.text[u.start : u.end])
                starts.append(u.start)
                ends.append(u.end)
            offset += len(p.units)
        units = Units(
            scores=np.asarray(scores, dtype=np.float64),
            passage=np.asarray(passage_ix, dtype=np.int64),
            paragraph=np.asarray(paragraph, dtype=np.int64),
            heading=np.asarray(heading, dtype=np.int64),
            tokens=np.asarray(tokens, dtype=np.int64),
            texts=texts,
            relevance=relevance,
        )
        keep, removed = select(units, params)
        starts_a, ends_a = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        results, pieces = [], []
        for pi, p in enumerate(passages):
            sel = units.passage == pi
            spans = merge_spans(starts_a[sel], ends_a[sel], units.scores[sel], keep[sel])
            sentences = tuple(
                Sentence(k, u.start, u.end, float(s), bool(kp), u.kind, int(t))
                for k, (u, s, kp, t) in enumerate(
                    zip(p.units, units.scores[sel], keep[sel], units.tokens[sel])
                )
            )
            text = _join_spans(p.text, spans)
            if text:
                pieces.append(text)
            results.append(
                PassageResult(
                    id=p.id,
                    title=p.title,
                    text=text,
                    spans=tuple(Span(*s) for s in spans),
                    sentences=sentences,
                    relevance=float(relevance[pi]),
                    original_length=len(p.text),
                )
            )
        tokens_in = int(units.tokens.sum())
        tokens_out = int(units.tokens[keep].sum())
        stats = PruneStats(
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            compression=1.0 - tokens_out / tokens_in if tokens_in else 0.0,
            sentences_in=len(units),
            sentences_out=int(keep.sum()),
            duplicates_removed=removed,
            encoder_seconds=0.0,
            postprocess_seconds=0.0,
        )
        return PruneResult(query, "\n\n".join(pieces), tuple(results), stats, params.threshold)


def _join_spans(text: str, spans) -> str:
    """Kept spans of a passage joined by a newline where the original gap had one, else a space."""
    parts = []
    for k, (s, e, _) in enumerate(spans):
        if k:
            parts.append("\n" if "\n" in text[spans[k - 1][1] : s] else " ")
        parts.append(text[s:e])
    return "".join(parts)


def _with_timings(result: PruneResult, encoder: float, post: float) -> PruneResult:
    return replace(result, stats=replace(result.stats, encoder_seconds=encoder, postprocess_seconds=post))
