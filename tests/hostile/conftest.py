"""A real ``modelyard serve`` (a subprocess, no demo) for the hostile-input suite.

One server serves the whole directory; every test sends it what an attacker or a careless
user would, over real HTTP on loopback, and reads what the server answered. The server must
bound the work itself: the client timeouts here are far above what any refusal takes, so a
test that hits one has found an unbounded case.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.ports import reserved_port

STARTUP_SECONDS = 120.0
# Far above any refusal (milliseconds); reaching it means the server did not bound the case.
CLIENT_TIMEOUT_SECONDS = 60.0


def free_port() -> int:
    """A port for a child ``modelyard serve`` to bind (``testing/ports.py``: no race under -n)."""
    return reserved_port()


@dataclass
class HostileTarget:
    process: subprocess.Popen[bytes]
    data_dir: Path
    port: int
    password: str
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, *, admin: bool = False) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            timeout=CLIENT_TIMEOUT_SECONDS,
            auth=("admin", self.password) if admin else None,
            verify=shared_tls_context(),
        )

    def rss_bytes(self) -> int:
        return int(psutil.Process(self.process.pid).memory_info().rss)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def create_key(self, name: str) -> str:
        with self.client(admin=True) as client:
            response = client.post("/api/v1/keys", json={"name": name})
        assert response.status_code == 201, response.text
        key: str = response.json()["key"]
        return key


def start_server(
    data_dir: Path,
    log_path: Path,
    environment: dict[str, str] | None = None,
    arguments: tuple[str, ...] = (),
) -> HostileTarget:
    port = free_port()
    log_file = open(log_path, "wb")  # noqa: SIM115 - kept open for the child's lifetime
    command = [sys.executable, "-m", "modelyard.cli.main", "serve", "--no-demo"]
    process = subprocess.Popen(
        [*command, "--data-dir", str(data_dir), "--port", str(port), *arguments],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env={**os.environ, "NO_COLOR": "1", "HF_HUB_OFFLINE": "1", **(environment or {})},
    )
    deadline = time.monotonic() + STARTUP_SECONDS
    password_file = data_dir / "admin-password"
    while True:
        if process.poll() is not None:
            raise AssertionError(f"modelyard serve exited with {process.returncode}:\n{log_path.read_text()}")
        if password_file.is_file():
            try:
                response = httpx.get(
                    f"http://127.0.0.1:{port}/api/v1/system", timeout=5, verify=shared_tls_context()
                )
                if response.status_code == 401:
                    break
            except httpx.TransportError:
                pass
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"modelyard serve did not answer in {STARTUP_SECONDS:.0f} s")
        time.sleep(0.1)
    password = password_file.read_text().strip()
    return HostileTarget(process, data_dir, port, password, log_path)


def stop_server(target: HostileTarget) -> None:
    target.process.terminate()
    try:
        target.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        target.process.kill()
        target.process.wait()


@pytest.fixture(scope="session")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileTarget]:
    folder = tmp_path_factory.mktemp("hostile")
    server = start_server(folder / "data", folder / "serve.log")
    try:
        yield server
    finally:
        stop_server(server)
