"""The limits of `pruner serve` (:class:`ServerLimits`) and the checks of one request against
them (:class:`RequestChecks`), run in a worker thread before the request reaches the batcher."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pruner_model.core.alignment import count_tokens
from pruner_model.inference.budget import PRUNER, check_served
from pruner_model.inference.pruner import ContextPruner
from pruner_model.inference.requests import PruneRequest
from pruner_model.inference.settings import MUST_KEEP_SECONDS, SelectionParams
from pruner_model.serving.schemas import PruneBody


@dataclass(frozen=True)
class ServerLimits:
    max_body_bytes: int = 2_000_000  # whole request body
    max_passages: int = 64  # passages per query
    max_passage_chars: int = 100_000  # characters per passage
    max_query_chars: int = 2_000
    max_batch_queries: int = 64  # queries per /v1/prune/batch request
    max_request_tokens: int = 60_000  # passage tokens per HTTP request (all its queries): the compute cap
    deadline_s: float = 30.0  # a request not answered by then gets a 504
    body_timeout_s: float = 10.0  # a client that has not sent its whole body by then gets a 408
    header_timeout_s: float = 10.0  # a connection whose request headers are not complete by then is closed
    max_concurrency: int = 64  # requests in progress at once (503 above); /health is not counted
    # request bodies being received at once (503 above), counted apart from the requests in
    # progress so that slow senders cannot take their slots; each holds at most max_body_bytes
    max_readers: int = 256
    # open connections, idle ones included (uvicorn answers 503 above): well above max_concurrency,
    # so that idle sockets cannot take the slots of requests
    max_connections: int = 1024
    # the budget_tokenizer names a request may choose (loaded at start-up); any other is a 422, so
    # a request cannot make the server load a tokenizer from a path or a hub id of its choosing
    budget_tokenizers: tuple[str, ...] = ()
    # a refused request (4xx) is answered no sooner than this after it arrived, its slots already
    # given back: a client that sends refused requests in a loop gets at most one answer this often
    # on each connection, instead of as much of the CPU as the refusals cost (0: at once)
    refusal_delay_s: float = 0.25


SUMMARIZER_THREADS = 8  # summarizer calls in flight at once (more wait for a thread, within their deadline)


class RequestChecks:
    """The limits of one request, checked before it reaches the batcher. Raise ``HTTPException``;
    call them from a worker thread (they segment and tokenize the texts)."""

    def __init__(self, pruner: ContextPruner, limits: ServerLimits):
        self.pruner, self.limits = pruner, limits

    @staticmethod
    def _error(code: int, detail: str):
        from fastapi import HTTPException

        return HTTPException(code, detail)

    def texts(self, texts: list[str], noun: str) -> None:
        """The size limits on one query's passages (or rerank documents): 422 with the reason."""
        if len(texts) > self.limits.max_passages:
            raise self._error(422, f"over {self.limits.max_passages} {noun}s")
        for i, text in enumerate(texts):
            if len(text) > self.limits.max_passage_chars:
                raise self._error(422, f"{noun} {i} over {self.limits.max_passage_chars} characters")

    def query(self, query: str) -> None:
        if len(query) > self.limits.max_query_chars:
            raise self._error(422, f"query over {self.limits.max_query_chars} characters")
        if not query.strip():
            raise self._error(422, "query is empty")

    def cheap_cost(self, texts: list[str]) -> None:
        """The token cap by a cheap lower bound first, before anything is segmented or tokenized:
        every whitespace-separated word is at least one token."""
        cap, words = self.limits.max_request_tokens, 0
        for text in texts:
            words += len(text.split())
            if words > cap:
                raise self._error(
                    413,
                    f"request has over {cap} passage words (each at least a token), over the limit of {cap} tokens",
                )

    def cost(self, requests: list[PruneRequest]) -> None:
        """The token cap, counted passage by passage and stopped as soon as it is passed."""
        cap, tokens = self.limits.max_request_tokens, 0
        for text in (p.text for r in requests for p in r.prepared):
            tokens += count_tokens(self.pruner.tokenizer, [text])
            if tokens > cap:
                raise self._error(413, f"request has over {cap} passage tokens, over the limit of {cap}")

    def prepare(
        self, query: str, passages: list, settings: dict, must_keep_deadline: float | None = None
    ) -> PruneRequest:
        """A request checked and segmented now: a batch never fails on this request's text."""
        try:
            check_served(settings.get("budget_tokenizer"), (PRUNER, *self.limits.budget_tokenizers))
        except ValueError as exc:
            raise self._error(422, str(exc)) from None
        if settings.get("summarize") and self.pruner.summarizer is None:
            raise self._error(
                422,
                "summarize: this server has no summarizer (pruner serve --summarizer-model NAME --summarizer-url URL)",
            )
        try:
            params = self.pruner.selection_params(SelectionParams(), **settings)
            return self.pruner.prepare(PruneRequest(query, passages, params), must_keep_deadline)
        except (ValueError, TypeError) as exc:
            raise self._error(422, str(exc)) from None

    def sizes(self, body: PruneBody) -> list[str]:
        """The query's and passages' size limits of one body; its passages' texts."""
        self.query(body.query)
        texts = [p if isinstance(p, str) else p.text for p in body.passages]
        self.texts(texts, "passage")
        return texts

    def prune_body(self, body: PruneBody, must_keep_deadline: float | None = None) -> PruneRequest:
        """One body, its sizes already checked (:meth:`sizes`), checked and segmented."""
        passages = [p if isinstance(p, str) else p.model_dump(exclude_none=True) for p in body.passages]
        settings = body.model_dump(exclude={"query", "passages"}, exclude_unset=True)
        if "must_keep" in settings:
            settings["must_keep"] = tuple(settings["must_keep"])
        return self.prepare(body.query, passages, settings, must_keep_deadline)

    def prune_bodies(self, bodies: list[PruneBody]) -> list[PruneRequest]:
        # cheap measures first: sizes, then words, before any segmenting
        self.cheap_cost([t for b in bodies for t in self.sizes(b)])
        # one must_keep budget for the whole request, however many queries it holds
        deadline = time.monotonic() + MUST_KEEP_SECONDS
        requests = [self.prune_body(b, deadline) for b in bodies]
        self.cost(requests)
        return requests

    def rerank(self, query: str, documents: list[str]) -> PruneRequest:
        self.query(query)
        self.texts(documents, "document")
        self.cheap_cost(documents)
        request = self.prepare(query, list(documents), {})
        self.cost([request])
        return request
