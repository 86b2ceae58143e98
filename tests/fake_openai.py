"""A scripted OpenAI-compatible chat endpoint on 127.0.0.1 for fault-injection tests.

Each request pops the next behaviour from ``script`` (then repeats ``default``):
"ok" (valid labels: sentence 1 of every passage), "429" (with Retry-After), "500", "garbage"
(non-JSON text), "truncated" (cut-off JSON), "unknown_id" (labels a passage not in the prompt),
"slow" (sleeps past the client's timeout), "drop" (closes the connection without an answer).
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    def __init__(self, script=None, default="ok", slow_seconds=3.0, retry_after="0.01"):
        self.retry_after = retry_after
        self.script = list(script or [])
        self.default = default
        self.slow_seconds = slow_seconds
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with fake.lock:
                    fake.requests.append(body)
                    action = fake.script.pop(0) if fake.script else fake.default
                if action == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if action == "slow":
                    time.sleep(fake.slow_seconds)
                    action = "ok"
                if action == "429":
                    return self._send(
                        429, {"error": {"message": "rate limited"}}, {"Retry-After": fake.retry_after}
                    )
                if action == "500":
                    return self._send(500, {"error": {"message": "boom"}})
                if action == "bad_request":
                    return self._send(400, {"error": {"message": "response_format not supported"}})
                aliases = sorted(set(re.findall(r"BEGIN PASSAGE (P\d+)", body["messages"][1]["content"])))
                if action == "ok":
                    content = json.dumps({a: {"sentences": [1], "reason": "r"} for a in aliases})
                elif action == "unknown_id":
                    content = json.dumps({"P99": {"sentences": [1], "reason": ""}})
                elif action == "truncated":
                    content = '{"P1": {"sent'
                else:
                    content = "I think the answer is Paris."
                self._send(
                    200,
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": content},
                            }
                        ],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                    },
                )

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

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
