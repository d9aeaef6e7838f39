"""A server SIGKILLed mid-download: the next `modelyard serve` resumes the task from the bytes on disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelyard.hub.download import part_path
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.hub_doubles import HuggingFaceHubDouble
from modelyard.testing.ports import reserved_port

from .conftest import REPO_ID, SHARD_1

pytestmark = pytest.mark.slow

HELD_AT_BYTE = 30_000


def _free_port() -> int:
    return reserved_port()  # testing/ports.py: no race under pytest -n


def _wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(0.05)


class ServeProcess:
    """`modelyard serve` as a user runs it, pointed at the hub double by HF_ENDPOINT."""

    def __init__(self, data_dir: Path, endpoint: str) -> None:
        self.data_dir = data_dir
        self.port = _free_port()
        self.environment = {key: value for key, value in os.environ.items() if key != "HF_HUB_OFFLINE"}
        self.environment.update(
            HF_ENDPOINT=endpoint,
            MODELYARD_DATA_DIR=str(data_dir),
            # Longer than the test: the held transfer must still hang when the server is killed.
            MODELYARD_DOWNLOAD_STALL_TIMEOUT_SECONDS="120",
            NO_COLOR="1",
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []

    def start(self) -> None:
        log = self.data_dir.parent / f"serve-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "modelyard.cli.main", "serve", "--no-demo", "--port", str(self.port)],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=self.environment,
            )
        _wait_until(self._answers, 120, "modelyard serve to answer")

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"modelyard serve exited: {self.logs[-1].read_text()}")
        try:
            return self.api("GET", "/system").status_code == 200
        except (httpx.TransportError, FileNotFoundError):
            # Refused, or reset: right after a SIGKILL the old server's gateway worker may still
            # hold its socket of the port while it drains, as ServeProcess.answering allows too.
            return False

    def api(self, method: str, path: str, **arguments: Any) -> httpx.Response:
        password = (self.data_dir / "admin-password").read_text().strip()
        url = f"http://127.0.0.1:{self.port}/api/v1{path}"
        return httpx.request(
            method, url, auth=("admin", password), timeout=30, verify=shared_tls_context(), **arguments
        )

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@pytest.fixture
def serve(tmp_path: Path, hf_hub: HuggingFaceHubDouble) -> Iterator[ServeProcess]:
    process = ServeProcess(tmp_path / "data", hf_hub.endpoint)
    try:
        yield process
    finally:
        process.stop()


def test_a_task_killed_with_the_server_resumes_where_it_stopped(
    serve: ServeProcess, hf_hub: HuggingFaceHubDouble
) -> None:
    hold = hf_hub.faults.hold_after(SHARD_1, HELD_AT_BYTE)
    serve.start()
    queued = serve.api("POST", "/models/pull", json={"source": f"hf://{REPO_ID}"})
    assert queued.status_code == 202, queued.text
    task_id = queued.json()["id"]
    target = Path(queued.json()["target"])
    assert hold.reached.wait(30)
    partial = part_path(target, SHARD_1)
    _wait_until(lambda: partial.is_file() and partial.stat().st_size == HELD_AT_BYTE, 30, "the bytes on disk")

    serve.kill()
    serve.start()

    deadline = time.monotonic() + 60
    while (task := serve.api("GET", f"/tasks/{task_id}").json())["state"] not in ("completed", "failed"):
        assert time.monotonic() < deadline, task
        time.sleep(0.1)
    assert task["state"] == "completed", task
    assert task["run_count"] == 2
    # The first server got 30,000 bytes of the shard; the second asked for the rest only.
    ranges = [request.range for request in hf_hub.log.for_file(SHARD_1)]
    assert ranges == [None, f"bytes={HELD_AT_BYTE}-"]
    model = serve.api("GET", "/models/tiny-qwen3").json()
    assert model["state"] == "valid" and model["files"]["problems"] == []
