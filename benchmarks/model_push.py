"""How fast ``modelyard models push`` copies a model to another host, and what a resume re-sends.

Two hosts as two network namespaces joined by a veth pair (as ``tests/cluster/test_two_hosts.py``):
``modelyard serve --cluster`` in A, ``modelyard worker join`` in B, B in a mount namespace of its
own whose models folder is an empty tmpfs (so B has only what is pushed to it). The model is the
tiny test model plus one ``--size-mb`` payload file of random bytes (weights do not compress).

- **baseline**, in the same run: the payload over one plain TCP connection from A to B (Python
  ``socket.sendfile`` into a file on B's tmpfs): what the veth pair and the disk give;
- **push**: the push task's start -> completed (every SHA-256 checked on B), first of a model
  added by path (hashed on A first, its manifest stored), then again into an empty B (the copy
  alone); the ratio push / baseline says what Ray's object store, the hashing and the task cost;
- **resume**: the copy on B removed, a push cancelled once about half the bytes are on B, then
  resumed (``tasks resume``); the bytes the resumed run sent, against the model's size.

    sudo python benchmarks/model_push.py --size-mb 200

Needs root (``ip netns``, ``unshare``, ``nsenter``) and the ray extra; takes about a minute.
Never run as a test. The load average is printed (this machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from modelyard.testing.cluster_process import (
    FAST_HEALTH_CHECKS,
    LOOPBACK_ONLY_VARIABLE,
    NVML_DOUBLE_FOLDER,
    SOURCE_FOLDER,
    nvml_gpu,
    with_group_killed,
)
from modelyard.testing.serve_process import free_port, wait_until

RECEIVER = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
connection, _ = server.accept()
with open(sys.argv[3], "wb") as out:
    while chunk := connection.recv(1 << 20):
        out.write(chunk)
"""
SENDER = """
import socket, sys, time
started = time.perf_counter()
with socket.create_connection((sys.argv[1], int(sys.argv[2]))) as connection, open(sys.argv[3], "rb") as f:
    connection.sendfile(f)
print(time.perf_counter() - started)
"""


def _ip(*arguments: str) -> None:
    subprocess.run(["ip", *arguments], check=True, capture_output=True, timeout=30)


class Hosts:
    def __init__(self, root: Path) -> None:
        suffix = secrets.token_hex(3)
        self.root = root
        self.a, self.b = f"push-a-{suffix}", f"push-b-{suffix}"
        subnet = f"10.{int(suffix[:2], 16) % 200 + 20}.{int(suffix[2:4], 16)}"
        self.address_a, self.address_b = f"{subnet}.1", f"{subnet}.2"
        self.port = free_port()
        self.models = root / "models"
        _ip("netns", "add", self.a)
        _ip("netns", "add", self.b)
        _ip("link", "add", f"pa{suffix}", "type", "veth", "peer", "name", f"pb{suffix}")
        for namespace, link, address in (
            (self.a, f"pa{suffix}", self.address_a),
            (self.b, f"pb{suffix}", self.address_b),
        ):
            _ip("link", "set", link, "netns", namespace)
            _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", link)
            _ip("-n", namespace, "link", "set", link, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")

    def environment(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "MODELYARD_URL": f"http://127.0.0.1:{self.port}",
            "MODELYARD_DATA_DIR": str(self.root / "data"),
            "NO_COLOR": "1",
            "OMP_NUM_THREADS": "1",
            LOOPBACK_ONLY_VARIABLE: "1",
            **FAST_HEALTH_CHECKS,
            **extra,
        }

    def in_a(self, *arguments: str) -> list[str]:
        return ["ip", "netns", "exec", self.a, *arguments]

    def in_b(self, *arguments: str) -> list[str]:
        """In B's network namespace, with B's own (empty) models folder."""
        script = 'mount -t tmpfs modelyard-b "$0" && exec "$@"'
        return [
            "ip",
            "netns",
            "exec",
            self.b,
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            str(self.models),
            *arguments,
        ]

    def cli(self, *arguments: str) -> Any:
        done = subprocess.run(
            self.in_a(sys.executable, "-m", "modelyard.cli.main", *arguments, "--json"),
            capture_output=True,
            text=True,
            env=self.environment(),
            timeout=600,
        )
        if done.returncode != 0:
            raise SystemExit(f"modelyard {' '.join(arguments)} failed:\n{done.stdout}{done.stderr}")
        return json.loads(done.stdout)

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        program = (
            "import httpx, json, sys; "
            "password = open(sys.argv[4]).read().strip(); "
            "r = httpx.request(sys.argv[1], sys.argv[2], json=json.loads(sys.argv[3]), "
            "auth=('admin', password), trust_env=False, timeout=60); print(r.text)"
        )
        done = subprocess.run(
            self.in_a(
                sys.executable,
                "-c",
                program,
                method,
                f"http://127.0.0.1:{self.port}/api/v1{path}",
                json.dumps(body),
                str(self.root / "data" / "admin-password"),
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        return json.loads(done.stdout)

    def canceller(self) -> subprocess.Popen[str]:
        """A process in A that cancels the task whose id it reads from stdin, at once."""
        program = (
            "import httpx, sys; password = open(sys.argv[2]).read().strip(); "
            "client = httpx.Client(auth=('admin', password), trust_env=False, timeout=60); "
            "client.get(sys.argv[1] + '/system'); task = sys.stdin.readline().strip(); "
            "print(client.post(sys.argv[1] + f'/tasks/{task}/cancel').status_code)"
        )
        return subprocess.Popen(
            self.in_a(
                sys.executable,
                "-c",
                program,
                f"http://127.0.0.1:{self.port}/api/v1",
                str(self.root / "data" / "admin-password"),
            ),
            stdin=subprocess.PIPE,
            text=True,
        )

    def close(self) -> None:
        for namespace in (self.a, self.b):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)


def _payload(size_mb: int, tiny: Path, model: Path) -> None:
    shutil.copytree(tiny, model)
    with (model / "payload.dat").open("wb") as out:
        for _ in range(size_mb):
            out.write(os.urandom(1 << 20))


def _baseline(hosts: Hosts, payload: Path, join_pid: int) -> float:
    port = free_port()
    target = hosts.models / "baseline.dat"  # on B's tmpfs
    receiver = subprocess.Popen(
        [
            "nsenter",
            "--net=/run/netns/" + hosts.b,
            "--mount",
            "--target",
            str(join_pid),
            sys.executable,
            "-c",
            RECEIVER,
            hosts.address_b,
            str(port),
            str(target),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert receiver.stdout is not None and receiver.stdout.readline().strip() == "listening"
    sent = subprocess.run(
        hosts.in_a(sys.executable, "-c", SENDER, hosts.address_b, str(port), str(payload)),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    receiver.wait(timeout=300)
    subprocess.run(["nsenter", "--mount", "--target", str(join_pid), "rm", "-f", str(target)], check=True)
    return float(sent.stdout.strip())


def _seconds(task: dict[str, Any]) -> float:
    from datetime import datetime

    return (
        datetime.fromisoformat(task["finished_at"]) - datetime.fromisoformat(task["started_at"])
    ).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200, help="The payload file's size (MiB).")
    parser.add_argument("--json", type=Path, help="Also write the figures here.")
    arguments = parser.parse_args()
    from modelyard.testing.tiny_model import build_tiny_qwen3

    root = Path(tempfile.mkdtemp(prefix="modelyard-push-bench-"))
    hosts = Hosts(root)
    server: subprocess.Popen[bytes] | None = None
    join: subprocess.Popen[bytes] | None = None
    try:
        model = hosts.models / "big"
        _payload(arguments.size_mb, build_tiny_qwen3(root / "tiny"), model)
        ray_port = free_port()
        with (root / "serve.log").open("wb") as log:
            server = subprocess.Popen(
                hosts.in_a(
                    sys.executable,
                    "-m",
                    "modelyard.cli.main",
                    "serve",
                    "--no-demo",
                    "--gateway-workers",
                    "0",
                    "--port",
                    str(hosts.port),
                    "--cluster",
                    "--ray-port",
                    str(ray_port),
                    "--ray-node-ip",
                    hosts.address_a,
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=hosts.environment(),
                start_new_session=True,
            )
        wait_until(
            lambda: (
                subprocess.run(
                    hosts.in_a(sys.executable, "-m", "modelyard.cli.main", "workers"),
                    capture_output=True,
                    env=hosts.environment(),
                ).returncode
                == 0
            ),
            180,
            "the server in A",
        )
        hosts.cli("models", "add", str(model), "--name", "big")
        nvml = root / "nvml-b.json"
        nvml.write_text(json.dumps({"gpus": [nvml_gpu("NVIDIA L4", 0, 24)]}))
        with (root / "join.log").open("wb") as log:
            join = subprocess.Popen(
                hosts.in_b(
                    sys.executable,
                    "-m",
                    "modelyard.cli.main",
                    "worker",
                    "join",
                    f"{hosts.address_a}:{ray_port}",
                    "--token-file",
                    str(root / "data" / "cluster-token"),
                    "--name",
                    "host-b",
                    "--node-ip",
                    hosts.address_b,
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=hosts.environment(
                    PYTHONPATH=f"{NVML_DOUBLE_FOLDER}{os.pathsep}{SOURCE_FOLDER}",
                    MODELYARD_NVML_DOUBLE=str(nvml),
                ),
            )

        def copy_on_b() -> str | None:
            copies = {copy["worker"]: copy for copy in hosts.api("GET", "/models/big")["workers"]}
            state = copies.get("host-b", {}).get("state")
            return None if state is None else str(state)

        wait_until(lambda: copy_on_b() == "missing", 180, "host-b surveyed", interval=0.5)
        total = sum(path.stat().st_size for path in model.iterdir())
        baseline = _baseline(hosts, model / "payload.dat", join.pid)
        # A push: its task's own time (queued -> completed) and the command's.
        started = time.perf_counter()
        [task] = hosts.cli("models", "push", "big", "--worker", "host-b")
        command_seconds = time.perf_counter() - started
        push_seconds = _seconds(task)
        assert task["state"] == "completed", task
        # Again, with the manifest the first push stored: the copy alone (no hashing on A first).
        subprocess.run(["nsenter", "--mount", "--target", str(join.pid), "rm", "-rf", str(model)], check=True)
        [again] = hosts.cli("models", "push", "big", "--worker", "host-b")
        again_seconds = _seconds(again)
        # Resume: remove B's copy, cancel at about half, resume.
        subprocess.run(["nsenter", "--mount", "--target", str(join.pid), "rm", "-rf", str(model)], check=True)
        part = model / ".modelyard-partial" / "payload.dat.part"
        on_b = Path(f"/proc/{join.pid}/root") / part.relative_to("/")  # B's view of its own tmpfs
        canceller = hosts.canceller()
        [queued] = hosts.cli("models", "push", "big", "--worker", "host-b", "--no-wait")
        payload_bytes = (model / "payload.dat").stat().st_size
        deadline = time.monotonic() + 300
        while not on_b.exists() or on_b.stat().st_size < payload_bytes // 2:
            if time.monotonic() > deadline:
                raise SystemExit("the push did not reach half of the payload within 300 s")
            time.sleep(0.001)
        assert canceller.stdin is not None
        canceller.stdin.write(f"{queued['id']}\n")
        canceller.stdin.close()
        canceller.wait(timeout=60)
        wait_until(
            lambda: hosts.api("GET", f"/tasks/{queued['id']}")["state"] == "cancelled", 60, "cancelled"
        )
        kept = int(
            subprocess.run(
                ["nsenter", "--mount", "--target", str(join.pid), "stat", "-c", "%s", str(part)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        hosts.api("POST", f"/tasks/{queued['id']}/resume")
        wait_until(
            lambda: hosts.api("GET", f"/tasks/{queued['id']}")["state"] in ("completed", "failed"),
            300,
            "the resumed push",
        )
        resumed = hosts.api("GET", f"/tasks/{queued['id']}")
        assert resumed["state"] == "completed", resumed
        resent = total - kept
        figures = {
            "model_bytes": total,
            "baseline_tcp_seconds": round(baseline, 3),
            "baseline_mb_per_second": round(arguments.size_mb * 1.048576 / baseline, 1),
            "push_task_seconds": round(push_seconds, 3),
            "push_command_seconds": round(command_seconds, 3),
            "push_mb_per_second": round(total / 1e6 / push_seconds, 1),
            "push_over_baseline": round(push_seconds / baseline, 2),
            "push_with_manifest_task_seconds": round(again_seconds, 3),
            "push_with_manifest_mb_per_second": round(total / 1e6 / again_seconds, 1),
            "push_with_manifest_over_baseline": round(again_seconds / baseline, 2),
            "push_reason": task["reason"],
            "push_with_manifest_reason": again["reason"],
            "interrupted_at_bytes_on_b": kept,
            "interrupted_at_fraction": round(kept / total, 3),
            "resumed_run_sent_bytes": resent,
            "resumed_run_sent_fraction": round(resent / total, 3),
            "resumed_reason": resumed["reason"],
            "load_average": os.getloadavg(),
        }
        print(json.dumps(figures, indent=2))
        if arguments.json:
            arguments.json.write_text(json.dumps(figures, indent=2))
    finally:
        if join is not None:
            with_group_killed(join, signal.SIGTERM)
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=90)
            except subprocess.TimeoutExpired:
                server.kill()
        hosts.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
