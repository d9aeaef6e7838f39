"""A cluster as a user builds it, for tests and benchmarks: ``modelyard serve --cluster`` as a
child process (it starts its Ray head), and hosts joined with ``modelyard worker join`` (each one
more raylet on this host, its GPUs from an NVML double of its own: ``modelyard.testing.nvml_double``).
The engine is the engine double as a GPUStack-YAML backend (``ENGINE_DOUBLE_BACKEND_YAML``).

Every process started here is stopped by ``close``: the joins by their process group (the join,
its ``ray start`` and that node's Ray processes), the server with SIGTERM (it stops its engines,
then its head).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

import modelyard
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.serve_process import ServeProcess, free_port, wait_until

SOURCE_FOLDER = str(Path(modelyard.__file__).resolve().parent.parent)
NVML_DOUBLE_FOLDER = str(Path(modelyard.__file__).resolve().parent / "testing" / "nvml_double")
# A dead node noticed in about 2 s (Ray's defaults: a check every 3 s, 5 misses).
FAST_HEALTH_CHECKS = {
    "RAY_health_check_initial_delay_ms": "500",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
}
JOIN_SECONDS = 120.0
GIB = 1 << 30
ENGINE_DOUBLE_BACKEND_YAML = """\
backend_name: vllm-double
default_version: "1.0"
health_check_path: /health
version_configs:
  "1.0":
    entrypoint: python3 -m modelyard.bench.reference_server
    run_command: vllm serve {{model_path}} --host {{worker_ip}} --port {{port}}
      --served-model-name {{model_name}}
    custom_framework: cuda
modelyard:
  family: custom
"""


def nvml_gpu(name: str, index: int, memory_gib: float, *, used_gib: float = 0.0) -> dict[str, Any]:
    """One GPU as the NVML double reports it."""
    return {
        "name": name,
        "uuid": f"GPU-{name.replace(' ', '-').lower()}-{index}-{secrets.token_hex(4)}",
        "memory_total_bytes": int(memory_gib * GIB),
        "memory_used_bytes": int(used_gib * GIB),
        "utilization_percent": 0,
        "temperature_celsius": 35 + index,
    }


# Set by the session's simulated cluster (tests/ray_cluster.py) in this process's environment; a
# real join of another raylet needs it unset (Ray refuses multi-node clusters with it at 0).
LOOPBACK_ONLY_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@dataclass
class JoinedWorker:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    started_at: float

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class JoinedCluster:
    root: Path
    server: ServeProcess
    ray_port: int
    arguments: tuple[str, ...] = ()
    workers: dict[str, JoinedWorker] = field(default_factory=dict)

    @property
    def token_file(self) -> Path:
        return self.server.data_dir / "cluster-token"

    def head_address(self) -> str:
        record = json.loads((self.server.data_dir / "cluster-head.json").read_text())
        return str(record["address"])

    def cli(self, *arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "modelyard.cli.main", *arguments],
            capture_output=True,
            text=True,
            env={**self.server.environment(), **(env or {})},
            timeout=120,
        )

    def join(
        self,
        name: str,
        gpus: list[dict[str, Any]],
        labels: dict[str, str] | None = None,
        *,
        hidden: Path | None = None,
        arguments: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> JoinedWorker:
        """``modelyard worker join HEAD --token-file ... --name NAME`` with this node's GPUs.

        ``hidden``: a folder this host does not have (an empty tmpfs over it, in a mount
        namespace of the join's own: root only), as a host without the model directory.
        ``arguments``: more options of the join (``--engine-ports A-B``); ``env``: more of its
        environment (``DOCKER_HOST`` pointing nowhere: a host whose Docker does not answer)."""
        nvml_file = self.root / f"nvml-{name}.json"
        nvml_file.write_text(json.dumps({"driver_version": "580.95.05", "gpus": gpus}))
        log_path = self.root / f"join-{name}.log"
        label_arguments = [
            part for key, value in (labels or {}).items() for part in ("--label", f"{key}={value}")
        ]
        environment = {
            **self.server.environment(),
            "PYTHONPATH": f"{NVML_DOUBLE_FOLDER}{os.pathsep}{SOURCE_FOLDER}",
            "MODELYARD_NVML_DOUBLE": str(nvml_file),
            **(env or {}),
        }
        started_at = time.monotonic()
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [
                    *(_without(hidden) if hidden is not None else []),
                    sys.executable,
                    "-m",
                    "modelyard.cli.main",
                    "worker",
                    "join",
                    self.head_address(),
                    "--token-file",
                    str(self.token_file),
                    "--name",
                    name,
                    *label_arguments,
                    *arguments,
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,
            )
        worker = JoinedWorker(name, process, log_path, started_at)
        self.workers[name] = worker
        return worker

    def listed(self) -> dict[str, dict[str, Any]]:
        with self.server.api() as client:
            answer = client.get("/api/v1/workers")
        assert answer.status_code == 200, answer.text
        return {worker["name"]: worker for worker in answer.json()["workers"]}

    def wait_for_state(self, name: str, state: str) -> float:
        """Seconds from the join's start until ``name`` shows ``state`` (with GPUs, for ready)."""
        worker = self.workers.get(name)

        def shown() -> bool:
            if worker is not None and state == "ready" and worker.process.poll() is not None:
                raise AssertionError(f"worker join {name} exited:\n{worker.log()}")
            found = self.listed().get(name)
            return found is not None and found["state"] == state and (state != "ready" or bool(found["gpus"]))

        wait_until(shown, JOIN_SECONDS, f"worker {name} {state}", interval=0.2)
        return time.monotonic() - worker.started_at if worker else 0.0

    def kill_worker(self, name: str) -> None:
        """The host's node dies at once: SIGKILL to the join, its ray start and its node's processes."""
        worker = self.workers.pop(name)
        with_group_killed(worker.process, signal.SIGKILL)

    def restart_after_sigkill(self) -> None:
        """SIGKILL the server (its head and the engines live on), start it again, wait for it."""
        self.server.kill()
        self.server.start(*self.arguments)
        self.server.wait_until_answering(seconds=180)

    def close(self) -> None:
        for name in list(self.workers):
            worker = self.workers.pop(name)
            with_group_killed(worker.process, signal.SIGTERM)
        self.server.stop()


def _without(folder: Path) -> list[str]:
    """A command prefix that runs the rest with ``folder`` empty (an own mount namespace)."""
    script = 'mount -t tmpfs modelyard-hidden "$0" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(folder)]


def with_group_killed(process: subprocess.Popen[bytes], signal_number: int) -> None:
    try:
        os.killpg(process.pid, signal_number)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def start_cluster(root: Path, *extra_arguments: str, fast_health_checks: bool = True) -> JoinedCluster:
    """``modelyard serve --cluster`` on free ports, answering (its head started). With
    ``fast_health_checks`` a dead host is noticed in about 2 s; without, Ray's defaults."""
    ray_port = free_port()
    checks = FAST_HEALTH_CHECKS if fast_health_checks else {}
    server = ServeProcess(data_dir=root / "data", extra_env={**checks, LOOPBACK_ONLY_VARIABLE: "1"})
    arguments = (
        "--no-demo",
        "--gateway-workers",
        "0",
        "--cluster",
        "--ray-port",
        str(ray_port),
        *extra_arguments,
    )
    server.start(*arguments)
    cluster = JoinedCluster(root=root, server=server, ray_port=ray_port, arguments=arguments)
    try:
        server.wait_until_answering(seconds=180)
    except BaseException:
        cluster.close()
        raise
    return cluster


def chat(base_url: str, key: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=60,
        trust_env=False,
        verify=shared_tls_context(),
    )
