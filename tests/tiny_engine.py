"""transformers serve on a tiny test model, launched exactly as the platform launches an engine.

Usage::

    with run_tiny_engine(model_dir, tmp_path / "engine.log") as engine:
        httpx.post(f"{engine.base_url}/v1/chat/completions", json={"model": engine.model_path, ...})
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.ports import reserved_port

ENGINE_START_SECONDS = 120.0


class EngineDidNotStart(AssertionError):
    pass


@dataclass(frozen=True)
class TinyEngine:
    base_url: str
    # transformers serve names a model by its path: clients send it as "model".
    model_path: str
    health_path: str


@contextmanager
def run_tiny_engine(model_dir: Path, log_path: Path) -> Iterator[TinyEngine]:
    """The built-in transformers version rendered as is (argv, env), on a free port, until exit."""
    from modelyard.backends.catalog import BackendCatalog, load_builtin_backends
    from modelyard.backends.render import render_launch

    port = reserved_port()  # transformers serve binds it itself (testing/ports.py)
    version = BackendCatalog(builtin=load_builtin_backends()).resolve_version("transformers", None)
    launch = render_launch(
        version,
        model_path=str(model_dir),
        port=port,
        worker_ip="127.0.0.1",
        model_name="tiny",
        gpu_ids=[],
        backend_parameters=[],
        env={},
    )
    # transformers serve lists the Hugging Face cache in /v1/models and answers 500 without it.
    (Path.home() / ".cache" / "huggingface" / "hub").mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            launch.argv,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **launch.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ENGINE_START_SECONDS
        while True:
            if process.poll() is not None:
                tail = log_path.read_text()[-2000:]
                raise EngineDidNotStart(f"engine exited with {process.returncode}: {tail}")
            try:
                if (
                    httpx.get(
                        f"{base_url}{version.health_path}", timeout=2, verify=shared_tls_context()
                    ).status_code
                    == 200
                ):
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise EngineDidNotStart(
                    f"engine not healthy after {ENGINE_START_SECONDS} s: {log_path.read_text()[-2000:]}"
                )
            time.sleep(0.2)  # polling a child process's port: no event to await
        yield TinyEngine(base_url=base_url, model_path=str(model_dir), health_path=version.health_path)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=version.stop_grace_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
