"""A real ``modelyard serve`` with gateway workers, and the engine double deployed behind it.

``ServedPlatform`` starts the server as a user would (a subprocess, its own data directory and
free port, ``--gateway-workers N``), then, through the REST API, registers a weightless model
directory, imports a custom backend that launches the reference server (the engine double) with
vLLM's command line, and deploys it. The controller starts real engine-double processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.ports import reserved_port
from modelyard.testing.weightless_model import build_weightless_model

# The engine double launched with each engine's own command line (vLLM's positional model,
# SGLang's --model-path), so the controller starts it where it would start the real engine.
ENGINE_COMMANDS = {
    "vllm": "vllm serve {{model_path}}",
    "sglang": "sglang --model-path {{model_path}}",
}
BACKEND_YAML = """\
backend_name: {flavor}-double
description: the reference server playing {flavor} (the engine double)
health_check_path: /health
modelyard:
  family: {flavor}
version_configs:
  "1.0":
    run_command: {python} -m modelyard.bench.reference_server {command} \
--host {{{{worker_ip}}}} --port {{{{port}}}} --served-model-name {{{{model_name}}}} \
--ttft-ms {ttft_ms} --itl-ms {itl_ms} --output-tokens 8 {extra}
    custom_framework: cpu
    modelyard:
      metrics_path: /metrics
      api_paths: [/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, /v1/messages]
"""


def free_port() -> int:
    """A port for a child ``modelyard serve`` to bind (``testing/ports.py``: no race under -n)."""
    return reserved_port()


@dataclass
class ServedPlatform:
    data_dir: Path
    gateway_workers: int
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    # Added to the server's environment (e.g. the NVML double on PYTHONPATH).
    environment: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- life cycle -------------------------------------------------------------------------------

    def start(self, timeout_s: float = 90.0, extra_arguments: tuple[str, ...] = ()) -> None:
        environment = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "NO_COLOR": "1"}
        environment.update(self.environment)
        argv = [sys.executable, "-m", "modelyard.cli.main", "serve", "--no-demo", "--host", "127.0.0.1"]
        argv += ["--port", str(self.port), "--data-dir", str(self.data_dir)]
        argv += ["--gateway-workers", str(self.gateway_workers), *extra_arguments]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = (self.data_dir.parent / "serve.log").open("wb")
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=environment)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"modelyard serve exited {self.process.returncode}: {self.log_tail()}")
            if (self.data_dir / "admin-password").exists():
                try:
                    if self.api("GET", "/api/v1/system", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"modelyard serve did not answer within {timeout_s:.0f} s: {self.log_tail()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log_tail(self) -> str:
        path = self.data_dir.parent / "serve.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"

    # -- as an admin ------------------------------------------------------------------------------

    @property
    def password(self) -> str:
        return (self.data_dir / "admin-password").read_text().strip()

    def api(self, method: str, path: str, **arguments: Any) -> httpx.Response:
        arguments.setdefault("timeout", 30)
        arguments.setdefault("verify", shared_tls_context())
        return httpx.request(method, self.url + path, auth=("admin", self.password), **arguments)

    def create_key(self, name: str) -> str:
        response = self.api("POST", "/api/v1/keys", json={"name": name})
        assert response.status_code == 201, response.text
        key: str = response.json()["key"]
        return key

    def deploy_double(
        self,
        name: str,
        scratch: Path,
        *,
        flavor: str = "vllm",
        replicas: int = 1,
        ttft_ms: float = 0,
        itl_ms: float = 0,
        extra: str = "",
    ) -> None:
        """Deploy the engine double (playing ``flavor``) as ``name``; wait until every replica runs."""
        model_dir = build_weightless_model(scratch / f"model-{name}")
        response = self.api("POST", "/api/v1/models", json={"path": str(model_dir), "name": f"model-{name}"})
        assert response.status_code in (200, 201), response.text
        yaml_text = BACKEND_YAML.format(
            flavor=flavor,
            command=ENGINE_COMMANDS[flavor],
            python=sys.executable,
            ttft_ms=ttft_ms,
            itl_ms=itl_ms,
            extra=extra,
        )
        response = self.api("POST", "/api/v1/backends/import", content=yaml_text.encode())
        assert response.status_code in (200, 201), response.text
        body = {
            "model": f"model-{name}",
            "name": name,
            "backend": f"{flavor}-double",
            "replicas": replicas,
            "skip_verification": True,
        }
        response = self.api("POST", "/api/v1/deployments", json=body)
        assert response.status_code == 201, response.text
        self.wait_running(name, replicas)

    def wait_running(self, name: str, replicas: int, timeout_s: float = 90.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        instances: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            instances = self.api("GET", f"/api/v1/deployments/{name}").json()["instances"]
            running = [item for item in instances if item["state"] == "running"]
            if len(running) == replicas and len(instances) == replicas:
                return running
            time.sleep(0.2)
        raise AssertionError(f"{name} did not reach {replicas} running replicas: {instances}")

    # -- the processes ----------------------------------------------------------------------------

    @property
    def metrics_token(self) -> str:
        return (self.data_dir / "metrics-token").read_text().strip()

    def metrics(self) -> str:
        headers = {"Authorization": f"Bearer {self.metrics_token}"}
        response = httpx.get(self.url + "/metrics", headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return response.text

    def worker_pids(self) -> list[int]:
        """The gateway worker processes (children of the server running the worker module); a
        killed one not yet reaped by the server (a zombie) is not one."""
        assert self.process is not None
        pids = []
        for child in psutil.Process(self.process.pid).children():
            try:
                if "modelyard.server.gateway.worker" in " ".join(child.cmdline()):
                    pids.append(child.pid)
            except (psutil.ZombieProcess, psutil.NoSuchProcess):
                continue
        return sorted(pids)
