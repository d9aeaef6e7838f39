"""The processes of the gateway benchmarks: modelyard serve, the exact upstream, LiteLLM, the client.

Each runs as its own process, pinned to CPUs with ``taskset`` (``cpus`` arguments: "0", "1",
"0,1"), so the proxy under test and the load around it do not share a core by accident.
Used by ``gateway_overhead.py`` and ``prefix_routing.py``; not a library.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

BENCHMARKS = Path(__file__).resolve().parent
UPSTREAM = BENCHMARKS / "exact_upstream.py"
CLIENT = BENCHMARKS / "lean_client.py"
LITELLM_VERSION = "1.108.7"
LITELLM_VENV = BENCHMARKS / ".venvs" / f"litellm-{LITELLM_VERSION}"
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")

BACKEND_YAML = """\
backend_name: exact-upstream
description: the benchmarks' exact-timing upstream (a benchmark double, not an engine)
health_check_path: /health
modelyard:
  family: vllm
version_configs:
  "1.0":
    run_command: taskset -c {cpus} {python} {upstream} --host {{{{worker_ip}}}} --port {{{{port}}}} \
--served-model-name {{{{model_name}}}} {options}
    custom_framework: cpu
    modelyard:
      metrics_path: /metrics
"""


class SetupFailed(Exception):
    """Something the benchmark needs could not be brought up; the message says what to look at."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def machine_busy_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    values = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8])
    return (total - idle) / CLOCK_TICKS_PER_S, total / CLOCK_TICKS_PER_S


def _environment(**extra: str) -> dict[str, str]:
    inherited = {key: value for key, value in os.environ.items() if key != "BENCH_API_KEY"}
    return inherited | {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "NO_COLOR": "1"} | extra


def _stop(process: subprocess.Popen[bytes] | None, *, group: bool = False) -> None:
    if process is None or process.poll() is not None:
        return
    if group:
        os.killpg(process.pid, signal.SIGTERM)
    else:
        process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
        process.wait()


@dataclass
class Platform:
    """``modelyard serve`` with N gateway workers, the upstream deployed behind it."""

    scratch: Path
    gateway_workers: int
    cpus: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    api_key: str = ""
    engine_port: int = 0
    # Extra environment of modelyard serve (e.g. MODELYARD_GATEWAY_GC).
    environment: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.scratch / "data"

    def api(self, method: str, path: str, **arguments: Any) -> httpx.Response:
        password = (self.data_dir / "admin-password").read_text().strip()
        return httpx.request(method, self.url + path, auth=("admin", password), timeout=60, **arguments)

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = ["taskset", "-c", self.cpus, sys.executable, "-m", "modelyard.cli.main", "serve", "--no-demo"]
        argv += ["--host", "127.0.0.1", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        argv += ["--gateway-workers", str(self.gateway_workers)]
        log = (self.scratch / "serve.log").open("wb")
        self.process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_environment(**self.environment),
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SetupFailed(f"modelyard serve exited: {self._log_tail()}")
            try:
                if (self.data_dir / "admin-password").exists() and self.api(
                    "GET", "/api/v1/system"
                ).is_success:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        else:
            raise SetupFailed(f"modelyard serve did not answer in 120 s: {self._log_tail()}")
        response = self.api("POST", "/api/v1/keys", json={"name": "bench"})
        self.api_key = response.json()["key"]

    def deploy(
        self, name: str, upstream_cpus: str, options: str, *, replicas: int = 1, routing: str = ""
    ) -> list[int]:
        """Deploy the exact upstream as ``name``; the engines' ports once running."""
        from modelyard.testing.weightless_model import build_weightless_model

        model = build_weightless_model(self.scratch / f"model-{name}")
        self._check(self.api("POST", "/api/v1/models", json={"path": str(model), "name": f"model-{name}"}))
        yaml_text = BACKEND_YAML.format(
            cpus=upstream_cpus,
            python=shlex.quote(sys.executable),
            upstream=shlex.quote(str(UPSTREAM)),
            options=options,
        )
        self._check(self.api("POST", "/api/v1/backends/import", content=yaml_text.encode()))
        body: dict[str, Any] = {"model": f"model-{name}", "name": name, "backend": "exact-upstream"}
        body |= {"replicas": replicas, "skip_verification": True}
        if routing:
            body["routing"] = routing
        self._check(self.api("POST", "/api/v1/deployments", json=body))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            instances = self.api("GET", f"/api/v1/deployments/{name}").json()["instances"]
            running = [item["port"] for item in instances if item["state"] == "running"]
            if len(running) == replicas:
                return running
            time.sleep(0.3)
        raise SetupFailed(f"{name} did not start: {self.api('GET', f'/api/v1/deployments/{name}').text}")

    def remove(self, name: str) -> None:
        self.api("DELETE", f"/api/v1/deployments/{name}")
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline and self.api("GET", f"/api/v1/deployments/{name}").status_code == 200
        ):
            time.sleep(0.3)

    def _check(self, response: httpx.Response) -> None:
        if response.status_code >= 300 and response.status_code != 409:
            raise SetupFailed(
                f"{response.request.method} {response.request.url}: {response.status_code} {response.text}"
            )

    def worker_pids(self) -> list[int]:
        assert self.process is not None
        main = self.main_pid()
        children = Path(f"/proc/{main}/task/{main}/children").read_text().split()
        return sorted(
            int(pid)
            for pid in children
            if "modelyard.server.gateway.worker"
            in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        )

    def serving_pids(self) -> list[int]:
        """The processes that handle /v1: the workers, or the main process when there are none."""
        return self.worker_pids() if self.gateway_workers else [self.main_pid()]

    def main_pid(self) -> int:
        assert self.process is not None
        # taskset execs the Python process: same pid.
        return self.process.pid

    def metrics_text(self) -> str:
        token = (self.data_dir / "metrics-token").read_text().strip()
        return httpx.get(self.url + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30).text

    def _log_tail(self) -> str:
        path = self.scratch / "serve.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"

    def stop(self) -> None:
        _stop(self.process, group=True)


@dataclass
class BareRelay:
    """``bare_relay.py`` in front of an upstream: the floor of a user-space relay (no HTTP)."""

    upstream_port: int
    cpus: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        script = Path(__file__).with_name("bare_relay.py")
        argv = ["taskset", "-c", self.cpus, sys.executable, str(script), "--port", str(self.port)]
        self.process = subprocess.Popen([*argv, "--upstream", f"127.0.0.1:{self.upstream_port}"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SetupFailed("the bare relay exited at its start")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise SetupFailed("the bare relay did not listen within 30 s")

    def stop(self) -> None:
        _stop(self.process)


@dataclass
class LiteLlmProxy:
    """LiteLLM's proxy in its own virtual environment (installed on first use), one worker."""

    scratch: Path
    # The served model name of each upstream (the same deployment names as through the gateway).
    upstream_urls: dict[str, str]
    cpus: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    # Its master key (it refuses to start without one); clients send it as their bearer key, so
    # both proxies check a key per request.
    master_key: str = field(default_factory=lambda: "sk-" + os.urandom(16).hex())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def install() -> Path:
        executable = LITELLM_VENV / "bin" / "litellm"
        if executable.exists():
            return executable
        print(f"installing litellm[proxy]=={LITELLM_VERSION} into {LITELLM_VENV} (once)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        pip = [str(LITELLM_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, f"litellm[proxy]=={LITELLM_VERSION}"], check=True)
        return executable

    def start(self) -> None:
        executable = self.install()
        config = self.scratch / "litellm.yaml"
        config.write_text(
            json.dumps(
                {
                    "model_list": [
                        {
                            "model_name": model,
                            "litellm_params": {
                                "model": f"openai/{model}",
                                "api_base": url + "/v1",
                                "api_key": "none",
                            },
                        }
                        for model, url in self.upstream_urls.items()
                    ],
                    "litellm_settings": {"drop_params": True, "set_verbose": False},
                }
            )
        )
        argv = [
            "taskset",
            "-c",
            self.cpus,
            str(executable),
            "--config",
            str(config),
            "--port",
            str(self.port),
        ]
        argv += ["--num_workers", "1"]
        log = (self.scratch / "litellm.log").open("wb")
        environment = _environment(
            LITELLM_LOG="ERROR",
            LITELLM_TELEMETRY="False",
            DISABLE_ADMIN_UI="True",
            LITELLM_MASTER_KEY=self.master_key,
        )
        self.process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SetupFailed(f"litellm exited: {(self.scratch / 'litellm.log').read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/health/liveliness", timeout=2).is_success:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SetupFailed("litellm did not answer in 180 s")

    def pids(self) -> list[int]:
        assert self.process is not None
        pids = [self.process.pid]
        pending = [self.process.pid]
        while pending:
            pid = pending.pop()
            try:
                children = [
                    int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                ]
            except FileNotFoundError:
                continue
            pids += children
            pending += children
        return pids

    def stop(self) -> None:
        _stop(self.process, group=True)


def run_client(
    url: str,
    *,
    cpus: str,
    streams: int,
    start: str,
    output_tokens: int,
    answer_s: float,
    duration_s: float,
    warmup_s: float,
    out: Path,
    api_key: str = "",
    model: str = "ref",
    prompt: str | None = None,
    extra: tuple[str, ...] = (),
    cpu_pids: list[int] | None = None,
) -> dict[str, Any]:
    argv = ["taskset", "-c", cpus, sys.executable, str(CLIENT), "--url", url, "--model", model]
    argv += ["--streams", str(streams), "--start", start, "--output-tokens", str(output_tokens)]
    argv += ["--answer-s", f"{answer_s:.4f}", "--duration-s", str(duration_s), "--warmup-s", str(warmup_s)]
    argv += ["--json", str(out), *extra]
    if cpu_pids:
        argv += ["--cpu-pids", ",".join(str(pid) for pid in cpu_pids)]
    if prompt is not None:
        argv += ["--prompt", prompt]
    environment = _environment(BENCH_API_KEY=api_key) if api_key else _environment()
    completed = subprocess.run(
        argv, env=environment, capture_output=True, timeout=duration_s + warmup_s + 300
    )
    if completed.returncode != 0:
        raise SetupFailed(f"the client failed: {completed.stderr.decode(errors='replace')[-2000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def require_taskset() -> None:
    if shutil.which("taskset") is None:
        raise SetupFailed("taskset is missing (Debian: util-linux); the benchmark pins every process with it")
