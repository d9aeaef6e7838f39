"""The built-in transformers version, rendered as is, starts a real engine that answers.

A real child process on loopback with a tiny random Qwen3 model in a directory whose name has a
space (it must stay one argument). About ten seconds on two CPU cores.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from modelyard.backends.catalog import BackendCatalog, load_builtin_backends
from modelyard.backends.render import render_launch

pytest.importorskip("torch")
pytest.importorskip("transformers")

from modelyard.testing.tiny_model import build_tiny_qwen3

START_DEADLINE_SECONDS = 120.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    model_path = str(build_tiny_qwen3(tmp_path_factory.mktemp("engine") / "tiny qwen3"))
    port = free_port()
    version = BackendCatalog(builtin=load_builtin_backends()).resolve_version("transformers", None)
    launch = render_launch(
        version,
        model_path=model_path,
        port=port,
        worker_ip="127.0.0.1",
        model_name="tiny",
        gpu_ids=[],
        backend_parameters=[],
        env={},
    )
    log_path = tmp_path_factory.mktemp("logs") / "engine.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            launch.argv,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **launch.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_DEADLINE_SECONDS
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"engine exited with {process.returncode}: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}{version.health_path}", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)  # polling a child process's port: no event to await
        else:
            pytest.fail(
                f"engine not healthy after {START_DEADLINE_SECONDS} s: {log_path.read_text()[-2000:]}"
            )
        yield model_path, port
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=version.stop_grace_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_rendered_transformers_engine_answers_a_chat_request_for_the_model_path(
    engine: tuple[str, int],
) -> None:
    model_path, port = engine
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json={"model": model_path, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 3
