"""``modelyard serve`` as a child process for tests: start it, talk to its REST API, kill it.

Usage::

    server = ServeProcess(data_dir=tmp_path / "data")
    server.start("--no-demo")
    server.wait_until_answering()
    server.api().post("/api/v1/models", json={"path": str(model_dir), "name": "tiny"})
    server.kill()                     # SIGKILL: engines outlive it
    server.start("--no-demo")         # the next server re-adopts them
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from modelyard.runtimes.engine_environment import ENV_DEPLOYMENT, ENV_LAUNCH_TOKEN, ENV_OWNER
from modelyard.runtimes.engine_ports import PortRange
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.ports import reserved_port, reserved_port_window

START_SECONDS = 120.0


def free_port() -> int:
    """A port for a child server to bind (``testing/ports.py``: this test process's own slice,
    never a port the kernel hands out, so parallel test runs do not race for it)."""
    return reserved_port()


def free_port_window(size: int) -> PortRange:
    """``size`` consecutive ports that nothing is bound to, of this test process's slice."""
    return reserved_port_window(size)


def wait_until(condition: Callable[[], bool], seconds: float, what: str, interval: float = 0.1) -> None:
    """Poll ``condition`` (there is no event to wait on across processes); fail naming ``what``."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class ServeProcess:
    data_dir: Path
    port: int = field(default_factory=free_port)
    extra_env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "MODELYARD_URL": self.url,
            "MODELYARD_DATA_DIR": str(self.data_dir),
            "HF_HUB_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            "NO_COLOR": "1",
            **self.extra_env,
        }

    def start(self, *arguments: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.data_dir.parent / f"serve-{len(self.logs) + 1}.log"
        self.logs.append(log_path)
        with log_path.open("wb") as log_file:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "modelyard.cli.main",
                    "serve",
                    "--data-dir",
                    str(self.data_dir),
                    "--port",
                    str(self.port),
                    *arguments,
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.environment(),
            )

    def log(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in self.logs if path.exists())

    def owner(self) -> str:
        """The id this server's engines carry (``<data-dir>/server-id``)."""
        return (self.data_dir / "server-id").read_text().strip()

    def engine_tokens(self) -> dict[str, set[str]]:
        """Launch tokens of this server's live engine processes, by deployment (zombies left out):
        one token per engine, so ``{"chat": {...one...}}`` is one engine for ``chat``."""
        owner = self.owner()
        found: dict[str, set[str]] = {}
        for process in psutil.process_iter(["status"]):
            try:
                if process.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                environment = process.environ()
            except psutil.Error:
                continue
            if environment.get(ENV_OWNER) == owner:
                tokens = found.setdefault(environment.get(ENV_DEPLOYMENT, ""), set())
                tokens.add(environment.get(ENV_LAUNCH_TOKEN, ""))
        return found

    def password(self) -> str:
        return (self.data_dir / "admin-password").read_text().strip()

    def api(self, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            auth=("admin", self.password()),
            timeout=timeout,
            trust_env=False,
            verify=shared_tls_context(),
        )

    def answering(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(
                f"modelyard serve exited with {self.process.returncode}:\n{self.log()[-3000:]}"
            )
        try:
            with self.api(timeout=2.0) as client:
                return client.get("/api/v1/system").status_code == 200
        except (httpx.HTTPError, FileNotFoundError):
            return False

    def wait_until_answering(self, seconds: float = START_SECONDS) -> None:
        wait_until(self.answering, seconds, f"modelyard serve on port {self.port}")

    def kill(self) -> None:
        """SIGKILL the server, as the OOM killer would; its engines live on."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM and wait: the server stops its engines first."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
