"""Two hosts for real: two network namespaces joined by a veth pair, each with its own address
and no other route. ``modelyard serve --cluster --ray-node-ip A`` in one, ``modelyard worker
join A:PORT --node-ip B`` in the other; the deployment lands on host B, and the gateway on host
A reaches the engine at B's address. Everything goes through the CLI run inside the namespaces,
as a user on those hosts would. Needs root (``ip netns``), as CI has.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from modelyard.testing.cluster_process import (
    ENGINE_DOUBLE_BACKEND_YAML,
    LOOPBACK_ONLY_VARIABLE,
    NVML_DOUBLE_FOLDER,
    SOURCE_FOLDER,
    with_group_killed,
)
from modelyard.testing.serve_process import free_port, wait_until
from ray_cluster import fake_gpu, require_ray_for_tests

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2's `ip` (Debian: iproute2)"),
]
START_SECONDS = 180.0


@dataclass
class TwoHosts:
    host_a: str
    host_b: str
    address_a: str
    address_b: str
    root: Path
    port: int

    def run(self, namespace: str, *arguments: str) -> list[str]:
        return ["ip", "netns", "exec", namespace, *arguments]

    def environment(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "MODELYARD_URL": f"http://127.0.0.1:{self.port}",
            "MODELYARD_DATA_DIR": str(self.root / "data"),
            "NO_COLOR": "1",
            "OMP_NUM_THREADS": "1",
            # The session's simulated cluster set it to 0 in this process: Ray refuses to join then.
            LOOPBACK_ONLY_VARIABLE: "1",
            **extra,
        }

    def cli_on_a(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.run(self.host_a, sys.executable, "-m", "modelyard.cli.main", *arguments),
            capture_output=True,
            text=True,
            env=self.environment(),
            timeout=180,
        )

    def json_on_a(self, *arguments: str) -> Any:
        done = self.cli_on_a(*arguments, "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)


def _ip(*arguments: str) -> None:
    subprocess.run(["ip", *arguments], check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoHosts]:
    require_ray_for_tests()
    suffix = secrets.token_hex(3)
    host_a, host_b = f"my-a-{suffix}", f"my-b-{suffix}"
    subnet = f"10.{int(suffix[:2], 16) % 200 + 20}.{int(suffix[2:4], 16)}"
    hosts = TwoHosts(
        host_a, host_b, f"{subnet}.1", f"{subnet}.2", tmp_path_factory.mktemp("hosts"), free_port()
    )
    _ip("netns", "add", host_a)
    try:
        _ip("netns", "add", host_b)
        _ip("link", "add", f"va{suffix}", "type", "veth", "peer", "name", f"vb{suffix}")
        for namespace, link, address in (
            (host_a, f"va{suffix}", hosts.address_a),
            (host_b, f"vb{suffix}", hosts.address_b),
        ):
            _ip("link", "set", link, "netns", namespace)
            _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", link)
            _ip("-n", namespace, "link", "set", link, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
        yield hosts
    finally:
        for namespace in (host_a, host_b):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)


def test_a_replica_on_the_other_host_answers_through_this_host_s_gateway(
    two_hosts: TwoHosts, tiny_model_dir: Path
) -> None:
    hosts = two_hosts
    root = hosts.root
    ray_port = free_port()
    with (root / "serve.log").open("wb") as log:
        server = subprocess.Popen(
            hosts.run(
                hosts.host_a,
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
        )
    join: subprocess.Popen[bytes] | None = None
    try:
        wait_until(lambda: hosts.cli_on_a("workers").returncode == 0, START_SECONDS, "the server on host A")
        (root / "double.yaml").write_text(ENGINE_DOUBLE_BACKEND_YAML)
        assert hosts.cli_on_a("backends", "import", str(root / "double.yaml")).returncode == 0
        assert hosts.cli_on_a("models", "add", str(tiny_model_dir), "--name", "tiny").returncode == 0
        nvml_file = root / "nvml-b.json"
        nvml_file.write_text(json.dumps({"gpus": [fake_gpu("NVIDIA L40S", 0, 45)]}))
        with (root / "join.log").open("wb") as log:
            join = subprocess.Popen(
                hosts.run(
                    hosts.host_b,
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
                env=hosts.environment(
                    PYTHONPATH=f"{NVML_DOUBLE_FOLDER}{os.pathsep}{SOURCE_FOLDER}",
                    MODELYARD_NVML_DOUBLE=str(nvml_file),
                ),
                start_new_session=True,
            )

        def host_b_ready() -> bool:
            assert join is not None
            if join.poll() is not None:
                raise AssertionError(f"worker join on host B exited:\n{(root / 'join.log').read_text()}")
            workers = {worker["name"]: worker for worker in hosts.json_on_a("workers")["workers"]}
            found = workers.get("host-b")
            return found is not None and found["state"] == "ready" and bool(found["gpus"])

        wait_until(host_b_ready, START_SECONDS, "host-b ready", interval=0.5)
        workers = {worker["name"]: worker for worker in hosts.json_on_a("workers")["workers"]}
        assert workers["host-b"]["address"] == hosts.address_b
        assert workers["host-b"]["gpus"][0]["name"] == "NVIDIA L40S"
        deployed = hosts.cli_on_a(
            "deploy",
            "tiny",
            "--name",
            "chat",
            "--backend",
            "vllm-double",
            "--gpus",
            "1",
            "--skip-verification",
        )
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        [instance] = hosts.json_on_a("ps", "chat")["instances"]
        assert instance["host"] == hosts.address_b and instance["runtime"] == "ray"
        key = hosts.cli_on_a("keys", "create", "me", "--rotate").stdout.strip()
        program = (
            "import httpx, sys; "
            "r = httpx.post(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.argv[2]}, "
            "json={'model': 'chat', 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4}, "
            "trust_env=False, timeout=60); print(r.status_code); print(r.text)"
        )
        answer = subprocess.run(
            hosts.run(
                hosts.host_a,
                sys.executable,
                "-c",
                program,
                f"http://127.0.0.1:{hosts.port}/v1/chat/completions",
                key,
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        status, body = answer.stdout.split("\n", 1)
        assert status == "200", answer.stdout + answer.stderr
        assert json.loads(body)["choices"][0]["message"]["content"]
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=90)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if join is not None:
            with_group_killed(join, signal.SIGKILL)
