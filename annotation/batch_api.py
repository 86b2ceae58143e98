"""Labeling through an OpenAI-compatible Batch API: the requests go up as one JSONL file, the
provider runs them offline (at about half the price of online calls), and the answers come back
through the same validation, cache, rejects and accounting as online labeling.

Nothing lost, nothing paid twice:
* a request whose answer is already in the cache is not sent; identical requests are sent once;
* the submitted batch's id is kept in ``OUTPUT.batch.json`` until its results are ingested, so a
  run interrupted while waiting (or started with ``wait=False``) picks the same batch up again
  instead of submitting a new one;
* valid answers go to the cache first, then every group whose answers are all there is written;
  a group with a failed or invalid answer goes to the rejects file with the reason, and the next
  run sends only what is still missing.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from pruner_model.annotation.llm import Annotator, alone
from pruner_model.annotation.prompt import (
    InvalidAnswer,
    PromptPassage,
    build_messages,
    parse_answer,
    request_key,
)
from pruner_model.annotation.resume import drop_partial_groups
from pruner_model.core.records import atomic_open, resumable_output, usage_count

DONE = {"completed", "failed", "expired", "cancelled"}


class BatchFailed(RuntimeError):
    """The provider ended the batch without results (failed, expired or cancelled with no output)."""


def _requests(annotator: Annotator, group: dict) -> dict[str, tuple[str, list[PromptPassage]]]:
    """``{cache key: (query, passages of the request)}`` for every request the group needs (one
    listwise request, or one per passage)."""
    passages, listwise = annotator.plan(group)
    query = group["query"]
    requests = [passages] if listwise else [[alone(p)] for p in passages]
    return {request_key(annotator.s.model, query, ps): (query, ps) for ps in requests}


class BatchLabeler:
    """Labels groups through ``client.files`` / ``client.batches`` (the ``openai`` client's Batch API).

    Args:
        annotator: supplies the client, settings (model, prices, structured output), cache and accounting.
        poll_interval: seconds between status checks.
        price_factor: batch price as a share of the online prices in the settings (0.5 at OpenAI).
        wait: False submits the batch (or reports the status of the one in flight) and returns; a
            later run with the same output ingests it.
    """

    def __init__(
        self,
        annotator: Annotator,
        poll_interval: float = 30.0,
        price_factor: float = 0.5,
        wait: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if poll_interval < 0 or not 0 <= price_factor <= 1:
            raise ValueError("poll_interval must be >= 0 and price_factor in [0, 1]")
        self.a, self.poll_interval, self.price_factor = annotator, poll_interval, price_factor
        self.wait, self.sleep = wait, sleep
        self.status: str | None = None  # the last batch status seen

    @property
    def pending(self) -> bool:
        """A batch was seen still running (submitted without waiting, or checked again)."""
        return self.status is not None and self.status not in DONE

    # ------------------------------------------------------------------ submit
    def _submit(self, lines: list[dict], output: Path) -> dict:
        path = output.with_name(output.name + ".batch-input.jsonl")
        with atomic_open(path) as fh:
            fh.write("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
        try:  # the request file is only the upload's payload: removed whether or not it went up
            with open(path, "rb") as fh:
                uploaded = self.a.client.files.create(file=fh, purpose="batch")
            batch = self.a.client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
                metadata={"created_by": "pruner annotate"},
            )
        finally:
            path.unlink(missing_ok=True)
        self.a.acc.add(requests=len(lines))
        return {"batch_id": batch.id, "input_file_id": uploaded.id, "requests": len(lines)}

    def _poll(self, batch_id: str, progress=None):
        failures = 0
        while True:
            try:
                batch = self.a.client.batches.retrieve(batch_id)
            except Exception as exc:  # a transient error while waiting is retried, not fatal
                failures += 1
                if not self.a._is_retryable(exc) or failures > self.a.s.max_retries:
                    raise
                self.sleep(min(self.a.s.backoff_max, self.a.s.backoff_base * 2**failures))
                continue
            failures = 0
            self.status = batch.status
            counts = getattr(batch, "request_counts", None)
            if progress is not None and counts is not None:
                progress.set_postfix_str(
                    f"batch {batch.status}: {counts.completed}/{counts.total} done, {counts.failed} failed"
                )
            if batch.status in DONE or not self.wait:
                return batch
            self.sleep(self.poll_interval)

    # ------------------------------------------------------------------ results
    def _read(self, file_id: str | None) -> list[dict]:
        if not file_id:
            return []
        text = self.a.client.files.content(file_id).text
        out = []
        for line in text.splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("custom_id"), str):
                out.append(obj)
        return out

    def _ingest(self, batch, by_key: dict[str, tuple[str, list[PromptPassage]]]) -> dict[str, str]:
        """Valid answers into the cache; returns ``{key: why it has no answer}`` for the others."""
        s = self.a.s
        failed: dict[str, str] = {}
        for obj in self._read(getattr(batch, "output_file_id", None)) + self._read(
            getattr(batch, "error_file_id", None)
        ):
            key = obj["custom_id"]
            if key not in by_key:
                continue
            resp = obj.get("response") or {}
            body = resp.get("body") if isinstance(resp, dict) else None
            if obj.get("error") or not isinstance(body, dict) or resp.get("status_code", 200) >= 400:
                err = obj.get("error") or (body or {}).get("error") or {}
                msg = err.get("message") if isinstance(err, dict) else str(err)
                failed[key] = f"batch request failed: {str(msg or 'no answer')[:200]}"
                continue
            usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
            pt, ct = usage_count(usage.get("prompt_tokens")), usage_count(usage.get("completion_tokens"))
            cost = (pt / 1e6 * s.price_prompt + ct / 1e6 * s.price_completion) * self.price_factor
            self.a.acc.add(prompt_tokens=pt, completion_tokens=ct, estimated_cost=cost)
            choices = body.get("choices") or [{}]
            content = (choices[0].get("message") or {}).get("content") or ""
            try:
                parse_answer(content, by_key[key][1])
            except InvalidAnswer as exc:
                self.a.acc.add(invalid_answers=1)
                failed[key] = f"invalid answer: {exc}"
                continue
            self.a.remember(key, content)
        return failed

    # ------------------------------------------------------------------ a whole run
    def run(self, groups: list[dict], output: Path, rejects: Path, progress=None, inputs=()):
        """Label ``groups`` into ``output`` through one batch; returns the accounting.
        ``inputs``: the files the groups came from (never written to).

        Raises:
            BatchFailed: the batch ended without any result file (the state file is removed, so
                the next run submits again).
        """
        output, rejects = Path(output), Path(rejects)
        with (
            resumable_output(output, inputs, "pruner annotate"),
            resumable_output(rejects, inputs, "pruner annotate"),
        ):
            return self._run(groups, output, rejects, progress)

    # over 60 lines: the Batch API's submit / poll / collect states read top to bottom
    def _run(self, groups: list[dict], output: Path, rejects: Path, progress):
        state_path = output.with_name(output.name + ".batch.json")
        todo = drop_partial_groups(groups, output)
        self.a.acc.add(groups_skipped=len(groups) - len(todo))
        if progress is not None:
            progress.update(len(groups) - len(todo))
        plans = {str(g["id"]): _requests(self.a, g) for g in todo}
        by_key = {key: req for reqs in plans.values() for key, req in reqs.items()}
        t0 = time.perf_counter()
        state = json.loads(state_path.read_text()) if state_path.is_file() else None
        if state is None:
            missing = [k for k in by_key if k not in self.a.cache]
            self.a.acc.add(cache_hits=sum(len(r) for r in plans.values()) - len(missing))
            if missing:
                lines = [
                    {
                        "custom_id": key,
                        "method": "POST",
                        "url": "/v1/chat/completions",
                        "body": self.a.request_body(
                            build_messages(by_key[key][0], by_key[key][1], nonce=key[:12]),
                            by_key[key][1],
                            "json_schema" if self.a.structured == "auto" else self.a.structured,
                        ),
                    }
                    for key in missing
                ]
                state = self._submit(lines, output)
                with atomic_open(state_path) as fh:
                    json.dump(state, fh)
        failed: dict[str, str] = {}
        if state is not None:
            batch = self._poll(state["batch_id"], progress)
            if self.pending:
                self.a.acc.add(seconds=time.perf_counter() - t0)
                return self.a.acc  # submitted or still running: a later run ingests it
            failed = self._ingest(batch, by_key)
            if not getattr(batch, "output_file_id", None) and not getattr(batch, "error_file_id", None):
                state_path.unlink()
                raise BatchFailed(f"batch {state['batch_id']} ended {batch.status} without results")
        hits = self.a.acc.cache_hits  # label_group below reads this run's answers back from the cache
        with open(output, "a", encoding="utf-8") as out_fh, open(rejects, "a", encoding="utf-8") as rej_fh:
            for g in todo:
                missing = [k for k in plans[str(g["id"])] if k not in self.a.cache]
                if missing:
                    why = failed.get(missing[0], f"no answer in the batch (status {self.status})")
                    rej_fh.write(json.dumps({"id": g["id"], "reason": why}) + "\n")
                    self.a.acc.add(groups_rejected=1)
                else:  # every answer is cached: label_group sends nothing
                    records, _ = self.a.label_group(g)
                    out_fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
                    self.a.acc.add(groups_done=1)
                if progress is not None:
                    progress.update(1)
            out_fh.flush()
            rej_fh.flush()
        self.a.acc.cache_hits = hits
        if state_path.is_file():
            os.remove(state_path)
        self.a.acc.add(seconds=time.perf_counter() - t0)
        return self.a.acc
