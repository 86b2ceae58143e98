"""A scripted OpenAI-compatible chat endpoint on 127.0.0.1 for fault-injection tests.

Each request pops the next behaviour from ``script`` (then repeats ``default``):
"ok" (valid labels: sentence 1 of every passage), "429" (with Retry-After), "500", "garbage"
(non-JSON text), "truncated" (cut-off JSON), "unknown_id" (labels a passage not in the prompt),
"slow" (sleeps past the client's timeout), "drop" (closes the connection without an answer),
"drip" (sends an answer one byte a second for ``slow_seconds`` seconds, never finishing it).
"""

from __future__ import annotations

import json
import re
import threading
import time
from email.parser import BytesParser
from email.policy import default
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    def __init__(self, script=None, default="ok", slow_seconds=3.0, retry_after="0.01"):
        self.retry_after = retry_after
        self.script = list(script or [])
        self.default = default
        self.slow_seconds = slow_seconds
        self.requests: list[dict] = []
        self.authorizations: list[str | None] = []  # the Authorization header of every POST
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.batch_polls = 2  # status checks a batch stays in progress for
        self.upload_fails = False  # POST /files answers 500
        self.get_failures = 0  # GET requests (status checks, downloads) answered 500 first
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                parts = self.path.split("?")[0].strip("/").split("/")
                with fake.lock:
                    if fake.get_failures:
                        fake.get_failures -= 1
                        return self._send(500, {"error": {"message": "boom"}})
                    if parts[-2:-1] == ["batches"] and parts[-1] in fake.batches:
                        return self._send(200, fake._advance(parts[-1]))
                    if parts[-1] == "content" and parts[-2] in fake.files:
                        data = fake.files[parts[-2]]
                        self.send_response(200)
                        self.send_header("content-type", "application/octet-stream")
                        self.send_header("content-length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return None
                self._send(404, {"error": {"message": "not found"}})
                return None

            def do_POST(self):
                raw = self.rfile.read(int(self.headers["content-length"]))
                fake.authorizations.append(self.headers.get("authorization"))
                if self.path.endswith("/files") and fake.upload_fails:
                    return self._send(500, {"error": {"message": "upload failed"}})
                if self.path.endswith("/files"):
                    return self._send(200, fake._upload(raw, self.headers["content-type"]))
                body = json.loads(raw)
                if self.path.endswith("/batches"):
                    return self._send(200, fake._create_batch(body))
                with fake.lock:
                    fake.requests.append(body)
                    action = fake.script.pop(0) if fake.script else fake.default
                if action == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return None
                if action == "slow":
                    time.sleep(fake.slow_seconds)
                    action = "ok"
                if action == "drip":  # a valid answer, one byte a second: no single read times out
                    data = json.dumps(fake.answer(body, "ok")[1]).encode()
                    data = data[: int(fake.slow_seconds)] if len(data) > fake.slow_seconds else data
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data) + 1000))
                    self.end_headers()
                    try:
                        for byte in data:
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                            time.sleep(1.0)
                    except OSError:  # the client gave up
                        pass
                    self.close_connection = True
                    return None
                if action == "429":
                    return self._send(
                        429, {"error": {"message": "rate limited"}}, {"Retry-After": fake.retry_after}
                    )
                self._send(*fake.answer(body, action))
                return None

            def _send(self, code, obj, headers=None):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, body: dict, action: str) -> tuple[int, dict]:
        """The (status, JSON) a chat completion request gets under ``action``."""
        if action == "500":
            return 500, {"error": {"message": "boom"}}
        if action == "bad_request":
            return 400, {"error": {"message": "response_format not supported"}}
        aliases = sorted(set(re.findall(r"BEGIN PASSAGE (P\d+)", body["messages"][1]["content"])))
        if action == "ok":
            content = json.dumps({a: {"sentences": [1], "reason": "r"} for a in aliases})
        elif action == "unknown_id":
            content = json.dumps({"P99": {"sentences": [1], "reason": ""}})
        elif action == "truncated":
            content = '{"P1": {"sent'
        else:
            content = "I think the answer is Paris."
        return 200, {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }

    # -------------------------------------------------------------- Batch API (files + batches)
    def _upload(self, raw: bytes, content_type: str) -> dict:
        msg = BytesParser(policy=default).parsebytes(
            b"content-type: " + content_type.encode() + b"\r\n\r\n" + raw
        )
        part = next(p for p in msg.iter_parts() if p.get_filename())
        data = part.get_payload(decode=True)
        with self.lock:
            fid = f"file-{len(self.files)}"
            self.files[fid] = data
        return {
            "id": fid,
            "object": "file",
            "bytes": len(data),
            "created_at": 0,
            "filename": part.get_filename(),
            "purpose": "batch",
            "status": "processed",
        }

    def _create_batch(self, body: dict) -> dict:
        with self.lock:
            bid = f"batch-{len(self.batches)}"
            self.batches[bid] = {
                "id": bid,
                "object": "batch",
                "endpoint": body["endpoint"],
                "input_file_id": body["input_file_id"],
                "completion_window": body["completion_window"],
                "status": "validating",
                "created_at": 0,
                "request_counts": {"total": 0, "completed": 0, "failed": 0},
                "polls": 0,
            }
            return self._public(bid)

    def _public(self, bid: str) -> dict:
        return {k: v for k, v in self.batches[bid].items() if k != "polls"}

    def _advance(self, bid: str) -> dict:
        """One status check: in progress for ``batch_polls`` checks, then every line answered
        (each by the next scripted action), results in an output and an error file."""
        b = self.batches[bid]
        b["polls"] += 1
        if b["status"] == "validating":
            b["status"] = "in_progress"
        if b["status"] == "in_progress" and b["polls"] > self.batch_polls:
            out, err = [], []
            for line in self.files[b["input_file_id"]].decode().splitlines():
                req = json.loads(line)
                self.requests.append(req["body"])
                action = self.script.pop(0) if self.script else self.default
                code, obj = self.answer(req["body"], action)
                row = {"id": f"req-{len(out) + len(err)}", "custom_id": req["custom_id"]}
                if code == 200:
                    out.append({**row, "response": {"status_code": 200, "body": obj}, "error": None})
                else:
                    err.append({**row, "response": {"status_code": code, "body": obj}, "error": None})
            for name, rows in (("output_file_id", out), ("error_file_id", err)):
                if rows:
                    fid = f"file-{len(self.files)}"
                    self.files[fid] = "".join(json.dumps(r) + "\n" for r in rows).encode()
                    b[name] = fid
            b["status"] = "completed"
            b["request_counts"] = {"total": len(out) + len(err), "completed": len(out), "failed": len(err)}
        return self._public(bid)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
