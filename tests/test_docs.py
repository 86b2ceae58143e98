"""Docs that match the code: every training config key is documented."""

import dataclasses
import json
from pathlib import Path

import pytest
from pruner_model.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def test_every_config_key_is_in_the_config_reference():
    doc = (ROOT / "docs" / "training-config.md").read_text(encoding="utf-8")
    cfg = TrainConfig()
    for section in dataclasses.fields(cfg):
        assert f"## {section.name}" in doc, section.name
        for f in dataclasses.fields(getattr(cfg, section.name)):
            assert f"| `{f.name}` |" in doc, f"{section.name}.{f.name}"


def test_readme_stays_a_front_page():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def _commands(block: str) -> list[str]:
    """The shell commands of a ```bash block: continuation lines joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    return [
        line.split("  #")[0].strip()
        for line in joined.splitlines()
        if line.strip() and not line.startswith("#")
    ]


@pytest.mark.slow
def test_serving_docs_commands_run_from_any_folder(tiny_checkpoint, tmp_path):
    """docs/serving.md's shell blocks as written (export, serve, curl) in a folder that is not the
    repository, with the tiny checkpoint as runs/mine; only the port is a free one."""
    import re
    import shutil
    import subprocess

    from tests.serving.test_reliability import free_port

    shutil.copytree(tiny_checkpoint, tmp_path / "runs" / "mine")
    text = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    port = str(free_port())
    commands = [
        c.replace("8000", port)
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
        for c in _commands(block)
    ]
    assert any(c.startswith("pruner export") for c in commands) and any(
        c.startswith("curl") for c in commands
    )
    server = None
    try:
        for command in commands:
            if command.startswith("pruner serve"):
                server = subprocess.Popen(
                    f"{command} --port {port}" if "--port" not in command else command,
                    shell=True,
                    cwd=tmp_path,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,  # its own process group: the shell and the server end together
                )
                _wait_ready(server, port)
                continue
            run = subprocess.run(
                command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=600
            )
            assert run.returncode == 0, f"{command}: {run.stderr[-1500:]}"
            if command.startswith("curl"):
                assert "stats" in json.loads(run.stdout)
    finally:
        if server is not None:
            _end_group(server)


def _end_group(proc) -> None:
    """End a shell-started process and everything it started (``terminate()`` alone ends the
    shell and leaves the server running), then check that nothing of the group outlived it."""
    import os
    import signal
    import time

    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            os.killpg(proc.pid, 0)  # is any member of the group still alive?
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("a process started by the docs' serve line outlived the test")


def _wait_ready(server, port: str) -> None:
    import time

    import httpx

    deadline = time.time() + 120
    while time.time() < deadline:
        if server.poll() is not None:
            raise AssertionError(server.communicate()[1][-1500:])
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("pruner serve did not become ready")
