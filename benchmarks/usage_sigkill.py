"""Usage rows lost across server SIGKILLs under load: answered requests the database never counted.

Through modelyard itself, as a user runs it: ``modelyard serve`` on a temporary data directory
(SQLite), the tiny Qwen3 deployed on the project's engine double (the reference server playing
vLLM, a custom backend), an API key, and clients on loopback sending chat completions through
the gateway (half streamed) as fast as they are answered. Each round, after ``--load-s`` of load,
the server is killed with SIGKILL (its engine lives on and is re-adopted), then started again;
the clients count the requests that got their whole answer (a body with ``usage``, or a stream
through ``data: [DONE]``). The baseline round ends with SIGTERM instead (a graceful stop).

After the last round the server is stopped gracefully and ``usage_records`` is read: each
answered request must have its row (status 200). Lost = answered - recorded rows, per round
kind; the target is 0 over 10 SIGKILLs.

    python benchmarks/usage_sigkill.py
    python benchmarks/usage_sigkill.py --rounds 10 --clients 16 --load-s 3 --json /tmp/sigkill.json

Takes a couple of minutes; never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from modelyard.testing.tiny_model import build_tiny_qwen3

BACKEND_YAML = """\
backend_name: vllm-double
default_version: "1.0"
health_check_path: /health
version_configs:
  "1.0":
    run_command: >-
      {python} -m modelyard.bench.reference_server vllm serve {{{{model_path}}}}
      --host {{{{worker_ip}}}} --port {{{{port}}}} --served-model-name {{{{model_name}}}}
      --ttft-ms 2 --itl-ms 1 --output-tokens 8
    custom_framework: cpu
"""


SERVE = [sys.executable, "-m", "modelyard.cli.main", "serve", "--no-demo"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Server:
    data_dir: Path
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        handle = open(self.log, "ab")  # noqa: SIM115 - the child's log
        self.process = subprocess.Popen(
            [*SERVE, "--data-dir", str(self.data_dir), "--port", str(self.port)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1"},
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/api/v1/system", timeout=2).status_code in (200, 401):
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise SystemExit(f"modelyard serve did not answer; see {self.log}")

    def password(self) -> str:
        return (self.data_dir / "admin-password").read_text().strip()

    def stop(self, how: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(how)
        self.process.wait(timeout=60)


@dataclass
class Round:
    kind: str
    answered: int = 0
    failed: int = 0


@dataclass
class Load:
    url: str
    key: str
    clients: int
    current: Round = field(default_factory=lambda: Round("none"))
    stopping: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run_client(self, index: int) -> None:
        stream = index % 2 == 0
        body = {"model": "chat", "messages": [{"role": "user", "content": "count"}], "stream": stream}
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stopping:
                current = self.current
                try:
                    if stream:
                        with client.stream(
                            "POST", "/v1/chat/completions", json=body, headers=headers
                        ) as reply:
                            text = b"".join(reply.iter_bytes())
                        complete = (
                            reply.status_code == 200
                            and b"data: [DONE]" in text
                            and b"stream_interrupted" not in text
                        )
                    else:
                        reply = client.post("/v1/chat/completions", json=body, headers=headers)
                        complete = reply.status_code == 200 and '"usage"' in reply.text
                except httpx.HTTPError:
                    complete = False
                with self.lock:
                    if complete:
                        current.answered += 1
                    else:
                        current.failed += 1
                if not complete:
                    time.sleep(0.05)


def wait_running(server: Server, auth: tuple[str, str]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            shown = httpx.get(f"{server.url}/api/v1/deployments/chat", auth=auth, timeout=5).json()
            if shown.get("state") == "running":
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise SystemExit("the deployment did not come back to running")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="SIGKILL rounds (plus one SIGTERM baseline)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--load-s", type=float, default=3.0)
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="modelyard-sigkill-"))
    model = build_tiny_qwen3(folder / "tiny-qwen3")
    server = Server(folder / "data", free_port(), folder / "serve.log")
    server.start()
    auth = ("admin", server.password())
    with httpx.Client(base_url=server.url, auth=auth, timeout=60) as api:
        api.post(
            "/api/v1/backends/import", content=BACKEND_YAML.format(python=sys.executable)
        ).raise_for_status()
        api.post("/api/v1/models", json={"name": "tiny", "path": str(model)}).raise_for_status()
        api.post(
            "/api/v1/deployments",
            json={"model": "tiny", "name": "chat", "backend": "vllm-double", "skip_verification": True},
        ).raise_for_status()
        key = api.post("/api/v1/keys", json={"name": "load"}).json()["key"]
    wait_running(server, auth)

    load = Load(server.url, key, arguments.clients)
    threads = [
        threading.Thread(target=load.run_client, args=(index,), daemon=True) for index in range(load.clients)
    ]
    rounds: list[Round] = []
    for thread in threads:
        thread.start()
    kinds = ["SIGTERM"] + ["SIGKILL"] * arguments.rounds
    for number, kind in enumerate(kinds, start=1):
        load.current = Round(kind)
        rounds.append(load.current)
        time.sleep(arguments.load_s)
        server.stop(signal.SIGKILL if kind == "SIGKILL" else signal.SIGTERM)
        time.sleep(0.5)  # the clients see the server gone; later answers are the next round's
        print(f"round {number} ({kind}): {rounds[-1].answered} answered", flush=True)
        load.current = Round("restart")
        rounds.append(load.current)
        server.start()
        wait_running(server, auth)
    load.stopping = True
    for thread in threads:
        thread.join(timeout=60)
    server.stop(signal.SIGTERM)
    with sqlite3.connect(server.data_dir / "modelyard.db") as connection:
        recorded = connection.execute(
            "SELECT count(*) FROM usage_records WHERE status_code = 200"
        ).fetchone()[0]
    answered = sum(item.answered for item in rounds)
    restart_answered = sum(item.answered for item in rounds if item.kind == "restart")
    lost = max(0, answered - recorded)
    figures = {
        "sigkills": arguments.rounds,
        "clients": arguments.clients,
        "answered_requests": answered,
        "recorded_rows_status_200": recorded,
        "rows_lost": lost,
        "recorded_over_answered": round(recorded / answered, 4) if answered else None,
        "answered_while_restarting": restart_answered,
        "rounds": [asdict(item) for item in rounds if item.kind != "restart"],
        "target_rows_lost": 0,
    }
    print(json.dumps(figures, indent=2))
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
