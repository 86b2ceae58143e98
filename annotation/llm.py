"""LLM annotation through any OpenAI-compatible endpoint: bounded retries, concurrency, a
content-hash cache, resumable append-only output, and token/cost accounting.

Nothing lost, nothing paid twice:
* labeled records are appended group by group and flushed; a re-run with the same output skips
  the groups already there, and a half-written last line that a crashed run left is cut off first
  (only from a file the run itself was writing: :func:`pruner_model.core.records.resumable_output`);
* every successful answer is stored in a cache keyed by (model, prompt version, query, passages),
  so the same request is never sent twice, across runs too;
* a group whose answers stay invalid after the allowed retries goes to the rejects file with the
  reason (and is tried again on the next run).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TypeVar

from pruner_model.annotation.prompt import (
    PROMPT_VERSION,
    InvalidAnswer,
    PromptPassage,
    build_messages,
    parse_answer,
    prepare_passages,
    request_key,
    response_schema,
)
from pruner_model.annotation.resume import drop_partial_groups, read_jsonl_lenient
from pruner_model.annotation.settings import Accounting, AnnotatorSettings
from pruner_model.core.chat import ChatEndpoint, TransportError
from pruner_model.core.records import resumable_output

T = TypeVar("T")


class EndpointDown(RuntimeError):
    """Several groups in a row could not reach the endpoint: the run stops, its output resumable."""


def alone(p: PromptPassage) -> PromptPassage:
    """``p`` as the only passage of a pointwise request (alias P1)."""
    return PromptPassage("P1", p.id, p.title, p.text, p.units)


def estimate_tokens(messages: list[dict]) -> int:
    return sum(len(m["content"]) for m in messages) // 4 + 16


class Annotator(ChatEndpoint):
    """Labels grouped records ``{id, query, passages}`` with an OpenAI-compatible chat model
    (the transport, retries and accounting: :class:`pruner_model.core.chat.ChatEndpoint`)."""

    def __init__(self, settings: AnnotatorSettings, client=None, sleep: Callable[[float], None] = time.sleep):
        super().__init__(settings, client, sleep)
        self.cache: dict[str, str] = {}
        self._cache_fh = None

    def request_body(self, messages: list[dict], passages: list[PromptPassage], mode: str) -> dict:
        """The chat-completion request for ``messages`` (structured output by ``mode``)."""
        return self.chat_body(messages, response_schema(passages), "labels", mode)

    def ask(self, key: str, parse: Callable[[str], T], body: Callable[[str], dict]) -> T:
        """``parse`` of the answer to the request ``body(mode)``, cached under ``key``: the cache
        first, an answer ``parse`` refuses (:class:`InvalidAnswer`) asked again up to
        ``max_invalid`` times, a valid one stored."""
        with self._lock:
            cached = self.cache.get(key)
        if cached is not None:
            try:
                parsed = parse(cached)
                self.acc.add(cache_hits=1)
                return parsed
            except InvalidAnswer:
                pass
        last = None
        for _ in range(self.s.max_invalid + 1):
            content = self.complete(body)
            try:
                parsed = parse(content)
            except InvalidAnswer as exc:
                self.acc.add(invalid_answers=1)
                last = exc
                continue
            self.remember(key, content)
            return parsed
        raise InvalidAnswer(f"{last} (after {self.s.max_invalid + 1} answers)")

    # ------------------------------------------------------------------ one group
    def _ask(self, query: str, passages: list[PromptPassage]) -> dict[str, tuple[list[int], str]]:
        """Labels for ``passages`` from one request (cache first; invalid answers retried)."""
        key = request_key(self.s.model, query, passages)
        messages = build_messages(query, passages, nonce=key[:12])
        return self.ask(
            key,
            lambda content: parse_answer(content, passages),
            lambda mode: self.request_body(messages, passages, mode),
        )

    def plan(self, group: dict) -> tuple[list[PromptPassage], bool]:
        """The group's prompt passages and whether they fit one listwise request (else one
        request per passage)."""
        passages = prepare_passages(group["passages"])
        listwise = (
            estimate_tokens(build_messages(group["query"], passages, "x" * 12)) <= self.s.max_prompt_tokens
        )
        return passages, listwise

    def label_group(self, group: dict) -> tuple[list[dict], dict]:
        """Labeled records of one raw group and the mode used (listwise or pointwise)."""
        query = group["query"]
        passages, listwise = self.plan(group)
        labels: dict[str, tuple[list[int], str]] = {}
        if listwise:
            try:
                labels = self._ask(query, passages)
            except TransportError as exc:
                if "rejected by the endpoint" not in str(exc) or len(passages) == 1:
                    raise
                listwise = False  # most often the context window: one passage per call instead
        if not listwise:
            for p in passages:
                labels[p.alias] = self._ask(query, [alone(p)])["P1"]
        return self.records(group, passages, labels, listwise), {
            "mode": "listwise" if listwise else "pointwise"
        }

    def records(
        self,
        group: dict,
        passages: list[PromptPassage],
        labels: dict[str, tuple[list[int], str]],
        listwise: bool,
    ) -> list[dict]:
        """The labeled records of ``group`` from its passages' ``labels``."""
        gid = str(group["id"])
        source = f"llm:{self.s.model}@{PROMPT_VERSION}"
        records = []
        for p in passages:
            sents, reason = labels[p.alias]
            records.append(
                {
                    "id": f"{gid}/{p.id}",
                    "query": group["query"],
                    "title": p.title,
                    "context": p.text,
                    "relevant_spans": [[p.units[k - 1].start, p.units[k - 1].end] for k in sents],
                    "source": source,
                    "meta": {
                        "sentences": sents,
                        "reason": reason,
                        "mode": "listwise" if listwise else "pointwise",
                        "group": gid,
                    },
                }
            )
        return records

    # ------------------------------------------------------------------ cache
    def open_cache(self, path: Path) -> None:
        path = Path(path)
        if path.is_file() and path.stat().st_size:
            with open(path, "rb+") as fh:  # a crash mid-line: end it, never cut (it is skipped)
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")
        for obj in read_jsonl_lenient(path):
            if isinstance(obj.get("key"), str) and isinstance(obj.get("content"), str):
                self.cache[obj["key"]] = obj["content"]
        path.parent.mkdir(parents=True, exist_ok=True)
        self._cache_fh = open(path, "a", encoding="utf-8")

    def remember(self, key: str, content: str) -> None:
        with self._lock:
            self.cache[key] = content
            if self._cache_fh is not None:
                self._cache_fh.write(json.dumps({"key": key, "content": content}) + "\n")
                self._cache_fh.flush()

    # ------------------------------------------------------------------ a whole run
    def run(
        self, groups: list[dict], output: Path, rejects: Path, progress=None, inputs: Sequence[Path] = ()
    ) -> Accounting:
        """Label ``groups`` into ``output`` (appending, resumable); failures go to ``rejects``.
        ``inputs``: the files the groups came from (never written to).

        A group counts as done only when a record of every one of its passages is in ``output``
        (matched by ``meta.group`` and passage id, never parsed out of the record id); a partly
        written group is redone and its partial lines removed first.

        Raises:
            EndpointDown: ``max_connection_failures`` groups in a row could not connect. What was
                labeled stays in ``output``; the failed groups are not marked rejected, so a re-run
                against a restarted endpoint labels each remaining group exactly once.
        """
        output, rejects = Path(output), Path(rejects)
        with (
            resumable_output(output, inputs, "pruner annotate"),
            resumable_output(rejects, inputs, "pruner annotate"),
        ):
            return self._run(groups, output, rejects, progress)

    # over 60 lines: the submit/collect loop of a thread pool: its bookkeeping (pending, unreachable, down) is shared by every branch
    def _run(self, groups: list[dict], output: Path, rejects: Path, progress) -> Accounting:
        todo = drop_partial_groups(groups, output)
        self.acc.add(groups_skipped=len(groups) - len(todo))
        t0 = time.perf_counter()
        unreachable: list[dict] = []  # groups that failed to connect since the endpoint last answered
        answers_at_failure = 0
        down: str | None = None
        with (
            open(output, "a", encoding="utf-8") as out_fh,
            open(rejects, "a", encoding="utf-8") as rej_fh,
            ThreadPoolExecutor(max_workers=max(1, self.s.concurrency)) as pool,
        ):
            pending = {}
            it = iter(todo)

            def submit_next() -> bool:
                g = next(it, None) if down is None else None
                if g is None:
                    return False
                pending[pool.submit(self.label_group, g)] = g
                return True

            def reject(g: dict, reason: str) -> None:
                rej_fh.write(json.dumps({"id": g["id"], "reason": reason}) + "\n")
                rej_fh.flush()
                self.acc.add(groups_rejected=1)

            for _ in range(max(1, self.s.concurrency) * 2):
                if not submit_next():
                    break
            try:
                while pending:
                    finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                    for fut in finished:
                        g = pending.pop(fut)
                        try:
                            records, _ = fut.result()
                        except TransportError as exc:
                            if not exc.unreachable:
                                reject(g, str(exc))
                            else:
                                unreachable.append(g)
                                answers_at_failure = self._answers
                                if down is None and len(unreachable) >= self.s.max_connection_failures:
                                    down = str(exc)
                                    for other in pending:
                                        other.cancel()
                        except InvalidAnswer as exc:
                            reject(g, str(exc))
                        else:
                            out_fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
                            out_fh.flush()
                            self.acc.add(groups_done=1)
                            if self._answers > answers_at_failure:
                                # the endpoint answered since: those were isolated failures (a
                                # group answered from the cache says nothing about the endpoint)
                                for u in unreachable:
                                    reject(u, "could not connect to the endpoint")
                                unreachable.clear()
                        if progress is not None:
                            progress.update(1)
                        submit_next()
                    pending = {f: g for f, g in pending.items() if not f.cancelled()}
                if down is None:
                    for u in unreachable:
                        reject(u, "could not connect to the endpoint")
            except KeyboardInterrupt:
                for fut in pending:
                    fut.cancel()
                raise
            finally:
                self.acc.add(seconds=time.perf_counter() - t0)
                if self._cache_fh is not None:
                    self._cache_fh.flush()
        if down is not None:
            endpoint = self.s.base_url or os.environ.get("OPENAI_BASE_URL") or "the endpoint"
            left = len(groups) - self.acc.groups_done - self.acc.groups_skipped - self.acc.groups_rejected
            raise EndpointDown(
                f"{endpoint} is unreachable ({down}; {len(unreachable)} groups in a row could not connect): "
                f"stopped with {self.acc.groups_done} groups labeled and {left} left; restart the endpoint "
                "and run the same command again to resume"
            )
        return self.acc
