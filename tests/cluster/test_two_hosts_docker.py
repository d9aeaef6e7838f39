"""An image backend on the second of two hosts, each with a Docker engine of its own.

Two network namespaces joined by a veth pair are hosts A and B (a third pair lets this test
process reach A's API). Each runs its own ``dockerd`` (own ``--data-root``, ``--exec-root``,
``--pidfile`` and socket, no bridge, no iptables), entered with ``nsenter --net`` so that its
cgroups stay mounted; the test image is imported into each one (nothing is pulled). Their GPUs
are NVML doubles, and their Docker has the NVIDIA runtime's double: a runtime named ``nvidia``
(runc itself, as ``nvidia-ctk runtime configure`` names it) and an ``nvidia-container-runtime-hook``
that does nothing, so that a container with ``--gpus`` starts (with no GPU in it).

``modelyard serve --cluster`` runs on A (its Docker at ``DOCKER_HOST``), ``modelyard worker join``
on B (its own). The replica goes to B (the larger GPU), and the steps follow it: it answers
through A's gateway; ``docker kill`` on B → started again on B; every process of host B killed
with SIGKILL → the replica on A; B's dockerd started again (the host back) → no container of
the dead host left; ``rm`` → no container on either. Needs root (``ip netns``), as CI has.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelyard.testing.cluster_process import (
    FAST_HEALTH_CHECKS,
    LOOPBACK_ONLY_VARIABLE,
    NVML_DOUBLE_FOLDER,
    SOURCE_FOLDER,
    nvml_gpu,
    with_group_killed,
)
from modelyard.testing.container_image import SKELETON_TAG, host_python_mounts, skeleton_tar
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.serve_process import free_port, wait_until
from ray_cluster import require_ray_for_tests

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2's `ip` (Debian: iproute2)"),
    pytest.mark.skipif(shutil.which("dockerd") is None, reason="needs dockerd (Debian: docker.io)"),
    pytest.mark.skipif(shutil.which("nsenter") is None, reason="needs nsenter (Debian: util-linux)"),
]
START_SECONDS = 180.0
DOCKERD_SECONDS = 60.0
NVIDIA_HOOK_DOUBLE = (
    "#!/bin/sh\n# The NVIDIA container hook's double: no GPUs here to hand over.\ncat > /dev/null\nexit 0\n"
)
BACKEND_YAML = """\
backend_name: vllm-image
default_version: "1.0"
health_check_path: /health
version_configs:
  "1.0":
    image_name: {image}
    entrypoint: python3 -m modelyard.bench.reference_server
    run_command: vllm serve {{{{model_path}}}} --host {{{{worker_ip}}}} --port {{{{port}}}}
      --served-model-name {{{{model_name}}}}
    custom_framework: cuda
    env:
      PYTHONPATH: {source}
      PATH: {python_folder}:/usr/bin
"""


def _ip(*arguments: str) -> None:
    subprocess.run(["ip", *arguments], check=True, capture_output=True, timeout=30)


@dataclass
class DockerHost:
    """One host: its network namespace, its address, its own dockerd."""

    namespace: str
    address: str
    folder: Path  # short: dockerd's sockets live under it
    hook_folder: Path
    dockerd: subprocess.Popen[bytes] | None = None
    starts: int = 0
    # Registries it talks plain HTTP to (dockerd's --insecure-registry: an address or a CIDR).
    insecure_registries: tuple[str, ...] = ()

    @property
    def socket(self) -> str:
        return f"unix://{self.folder}/docker.sock"

    def docker(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "-H", self.socket, *arguments],
            capture_output=True,
            text=True,
            timeout=120,
            check=check,
        )

    def start_dockerd(self) -> None:
        """dockerd in this host's network namespace (also again, as after the host's reboot)."""
        for stale in ("docker.pid", "docker.sock"):
            (self.folder / stale).unlink(missing_ok=True)
        self.starts += 1
        runc = shutil.which("runc") or "/usr/sbin/runc"
        with (self.folder / f"dockerd-{self.starts}.log").open("wb") as log:
            self.dockerd = subprocess.Popen(
                [
                    "nsenter",
                    f"--net=/run/netns/{self.namespace}",
                    "dockerd",
                    "--data-root",
                    str(self.folder / "data"),
                    "--exec-root",
                    str(self.folder / "exec"),
                    "--pidfile",
                    str(self.folder / "docker.pid"),
                    "--host",
                    self.socket,
                    "--bridge",
                    "none",
                    "--iptables=false",
                    "--ip6tables=false",
                    "--add-runtime",
                    f"nvidia={runc}",
                    *(f"--insecure-registry={registry}" for registry in self.insecure_registries),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PATH": f"{self.hook_folder}{os.pathsep}{os.environ.get('PATH', '')}"},
            )

        def answering() -> bool:
            assert self.dockerd is not None
            if self.dockerd.poll() is not None:
                log_text = (self.folder / f"dockerd-{self.starts}.log").read_text(errors="replace")
                raise AssertionError(f"dockerd of {self.namespace} exited:\n{log_text[-2000:]}")
            return self.docker("info", check=False).returncode == 0

        wait_until(answering, DOCKERD_SECONDS, f"dockerd of {self.namespace}", interval=0.2)

    def stop_dockerd(self) -> None:
        if self.dockerd is not None and self.dockerd.poll() is None:
            self.dockerd.send_signal(signal.SIGTERM)
            try:
                self.dockerd.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.dockerd.kill()
                self.dockerd.wait()

    def containers(self) -> list[dict[str, Any]]:
        """Every container of a modelyard deployment on this host's dockerd, stopped ones too."""
        output = self.docker(
            "ps", "--all", "--no-trunc", "--format", "{{json .}}", "--filter", "label=modelyard.deployment"
        ).stdout
        return [json.loads(line) for line in output.splitlines() if line.strip()]

    def kill_every_process(self) -> None:
        """SIGKILL to every process of this host (its namespace): the host dies at once."""
        for _ in range(10):
            listed = subprocess.run(
                ["ip", "netns", "pids", self.namespace], capture_output=True, text=True, check=True
            ).stdout.split()
            if not listed:
                return
            for pid in listed:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    continue
            time.sleep(0.2)  # killed processes leave the namespace's list once reaped
        raise AssertionError(f"processes of {self.namespace} outlived SIGKILL")


@dataclass
class TwoDockerHosts:
    host_a: DockerHost
    host_b: DockerHost
    # A's address on the pair that joins it to this test process's namespace.
    api_address: str
    root: Path
    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://{self.api_address}:{self.port}"

    def environment(self, host: DockerHost, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "MODELYARD_URL": self.url,
            "MODELYARD_DATA_DIR": str(self.root / "data"),
            "DOCKER_HOST": host.socket,
            "NO_COLOR": "1",
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            # The session's simulated cluster set it to 0 in this process: Ray refuses to join then.
            LOOPBACK_ONLY_VARIABLE: "1",
            **FAST_HEALTH_CHECKS,
            **extra,
        }

    def with_gpus(self, host: DockerHost, gpu: dict[str, Any]) -> dict[str, str]:
        nvml_file = self.root / f"nvml-{host.namespace}.json"
        nvml_file.write_text(json.dumps({"driver_version": "580.95.05", "gpus": [gpu]}))
        return self.environment(
            host,
            PYTHONPATH=f"{NVML_DOUBLE_FOLDER}{os.pathsep}{SOURCE_FOLDER}",
            MODELYARD_NVML_DOUBLE=str(nvml_file),
        )

    def cli_on_a(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.host_a.namespace,
                sys.executable,
                "-m",
                "modelyard.cli.main",
                *arguments,
            ],
            capture_output=True,
            text=True,
            env=self.environment(self.host_a),
            timeout=180,
        )

    def api(self) -> httpx.Client:
        password = (self.root / "data" / "admin-password").read_text().strip()
        return httpx.Client(
            base_url=self.url,
            auth=("admin", password),
            timeout=30.0,
            trust_env=False,
            verify=shared_tls_context(),
        )


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoDockerHosts]:
    require_ray_for_tests()
    suffix = secrets.token_hex(3)
    subnet = f"10.{int(suffix[:2], 16) % 200 + 20}.{int(suffix[2:4], 16)}"
    api_subnet = f"10.{int(suffix[:2], 16) % 200 + 20}.{(int(suffix[2:4], 16) + 1) % 256}"
    hook_folder = tmp_path_factory.mktemp("nvidia-hook-double")
    hook = hook_folder / "nvidia-container-runtime-hook"
    hook.write_text(NVIDIA_HOOK_DOUBLE)
    hook.chmod(0o755)
    host_a = DockerHost(f"md-a-{suffix}", f"{subnet}.1", Path(f"/tmp/md-{suffix}-a"), hook_folder)
    # B pulls from a registry on A's address (test_two_hosts_registry.py), over plain HTTP.
    host_b = DockerHost(
        f"md-b-{suffix}",
        f"{subnet}.2",
        Path(f"/tmp/md-{suffix}-b"),
        hook_folder,
        insecure_registries=(f"{subnet}.0/24",),
    )
    hosts = TwoDockerHosts(host_a, host_b, f"{api_subnet}.2", tmp_path_factory.mktemp("docker-hosts"))
    made: list[str] = []
    try:
        for host in (host_a, host_b):
            _ip("netns", "add", host.namespace)
            made.append(host.namespace)
            host.folder.mkdir()
        _ip("link", "add", f"ma{suffix}", "type", "veth", "peer", "name", f"mb{suffix}")
        _ip("link", "add", f"mr{suffix}", "type", "veth", "peer", "name", f"mq{suffix}")
        links = (
            (host_a.namespace, f"ma{suffix}", f"{host_a.address}/24"),
            (host_b.namespace, f"mb{suffix}", f"{host_b.address}/24"),
            (host_a.namespace, f"mq{suffix}", f"{api_subnet}.2/24"),
        )
        for namespace, link, address in links:
            _ip("link", "set", link, "netns", namespace)
            _ip("-n", namespace, "addr", "add", address, "dev", link)
            _ip("-n", namespace, "link", "set", link, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("addr", "add", f"{api_subnet}.1/24", "dev", f"mr{suffix}")
        _ip("link", "set", f"mr{suffix}", "up")
        for host in (host_a, host_b):
            host.start_dockerd()
            subprocess.run(
                ["docker", "-H", host.socket, "import", "-", SKELETON_TAG],
                input=skeleton_tar(),
                capture_output=True,
                check=True,
                timeout=120,
            )
        yield hosts
    finally:
        for host in (host_a, host_b):
            host.stop_dockerd()
        subprocess.run(["ip", "link", "del", f"mr{suffix}"], capture_output=True, timeout=30)
        for namespace in made:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)
        for host in (host_a, host_b):
            _unmount_under(host.folder)
            shutil.rmtree(host.folder, ignore_errors=True)


def _unmount_under(folder: Path) -> None:
    """What a dockerd left mounted under its folder (its exec root's netns bind, overlays of a
    killed one)."""
    with open("/proc/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(f"{folder}/")]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)


def _instance(client: httpx.Client) -> dict[str, Any] | None:
    answer = client.get("/api/v1/deployments/chat")
    if answer.status_code != 200 or not answer.json()["instances"]:
        return None
    instance: dict[str, Any] = answer.json()["instances"][0]
    return instance


def _wait_for_instance(client: httpx.Client, condition: Callable[[dict[str, Any]], bool], what: str) -> float:
    """Seconds until the replica's instance meets ``condition`` (polled: another process's state)."""
    started = time.monotonic()

    def met() -> bool:
        instance = _instance(client)
        return instance is not None and condition(instance)

    wait_until(met, START_SECONDS, what, interval=0.1)
    return time.monotonic() - started


def _chat(hosts: TwoDockerHosts, key: str) -> httpx.Response:
    return httpx.post(
        f"{hosts.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        trust_env=False,
        timeout=60,
        verify=shared_tls_context(),
    )


def test_an_image_backend_on_the_second_host_restarts_there_fails_over_and_leaves_no_container(
    hosts: TwoDockerHosts, tiny_model_dir: Path
) -> None:
    host_a, host_b = hosts.host_a, hosts.host_b
    root = hosts.root
    arguments = ["--no-demo", "--gateway-workers", "0", "--host", "0.0.0.0", "--port", str(hosts.port)]
    arguments += ["--cluster", "--ray-port", str(free_port()), "--ray-node-ip", host_a.address]
    for mount in host_python_mounts():  # the engine double runs on this host's Python
        arguments += ["--docker-volume", f"{mount.host_path}:{mount.engine_path}:ro"]
    with (root / "serve.log").open("wb") as log:
        server = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                host_a.namespace,
                sys.executable,
                "-m",
                "modelyard.cli.main",
                "serve",
                *arguments,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=hosts.with_gpus(host_a, nvml_gpu("NVIDIA L4", 0, 24)),
        )
    join: subprocess.Popen[bytes] | None = None
    try:

        def server_answering() -> bool:
            if server.poll() is not None:
                raise AssertionError(f"serve on host A exited:\n{(root / 'serve.log').read_text()[-3000:]}")
            try:
                with hosts.api() as client:
                    return client.get("/api/v1/system").status_code == 200
            except (httpx.HTTPError, FileNotFoundError):
                return False

        wait_until(server_answering, START_SECONDS, "the server on host A", interval=0.2)
        source = str(Path(SOURCE_FOLDER))
        backend = BACKEND_YAML.format(
            image=SKELETON_TAG, source=source, python_folder=Path(sys.executable).parent
        )
        with hosts.api() as client:
            assert client.post("/api/v1/backends/import", content=backend).status_code in (200, 201)
            added = client.post("/api/v1/models", json={"path": str(tiny_model_dir), "name": "tiny"})
            assert added.status_code == 201, added.text
        with (root / "join.log").open("wb") as log:
            join = subprocess.Popen(
                [
                    *("ip", "netns", "exec", host_b.namespace, sys.executable, "-m", "modelyard.cli.main"),
                    *("worker", "join", f"{host_a.address}:{arguments[arguments.index('--ray-port') + 1]}"),
                    *("--token-file", str(root / "data" / "cluster-token"), "--name", "host-b"),
                    *("--node-ip", host_b.address),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=hosts.with_gpus(host_b, nvml_gpu("NVIDIA L40S", 0, 48)),
                start_new_session=True,
            )

        def host_b_ready() -> bool:
            assert join is not None
            if join.poll() is not None:
                raise AssertionError(f"worker join on host B exited:\n{(root / 'join.log').read_text()}")
            with hosts.api() as client:
                workers = {
                    worker["name"]: worker for worker in client.get("/api/v1/workers").json()["workers"]
                }
            found = workers.get("host-b")
            return found is not None and found["state"] == "ready" and bool(found["gpus"])

        wait_until(host_b_ready, START_SECONDS, "host-b ready", interval=0.2)
        with hosts.api() as client:
            listed = {worker["name"]: worker for worker in client.get("/api/v1/workers").json()["workers"]}
        assert listed["host-b"]["docker"] == {"engine": "ready", "gpus": "nvidia"}
        assert "Docker: ready, NVIDIA runtime" in (root / "join.log").read_text()

        # Deploy as a user would: the replica goes to B (the larger GPU) and runs in B's Docker.
        deploy_started = time.monotonic()
        deployed = hosts.cli_on_a(
            "deploy",
            "tiny",
            "--name",
            "chat",
            "--backend",
            "vllm-image",
            "--gpus",
            "1",
            "--skip-verification",
        )
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        with hosts.api() as client:
            _wait_for_instance(
                client, lambda instance: instance["state"] == "running", "chat running on host B"
            )
            to_running = time.monotonic() - deploy_started
            first = _instance(client)
        assert first is not None and first["host"] == host_b.address and first["runtime"] == "ray"
        [container] = host_b.containers()
        assert host_a.containers() == []
        inspected = json.loads(host_b.docker("inspect", container["ID"]).stdout)[0]
        [gpus] = inspected["HostConfig"]["DeviceRequests"]  # --gpus from the placement
        assert gpus["DeviceIDs"] == [str(gpu) for gpu in first["gpu_ids"]] == ["0"]
        labels = inspected["Config"]["Labels"]
        owner = (root / "data" / "server-id").read_text().strip()
        assert labels["modelyard.owner"] == owner and labels["modelyard.runtime"] == "ray"
        assert first["command"][:3] == ["docker", "run", "--rm"]
        assert {"host_path": str(tiny_model_dir), "read_only": True}.items() <= first["mounts"][0].items()
        [model_mount] = [
            mount for mount in inspected["Mounts"] if mount["Destination"].startswith("/models/")
        ]
        assert model_mount["Source"] == str(tiny_model_dir) and model_mount["RW"] is False
        key = hosts.cli_on_a("keys", "create", "me", "--rotate").stdout.strip()
        answer = _chat(hosts, key)
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"]

        # The container killed from outside: started again on B, in a new container there.
        host_b.docker("kill", container["Names"])
        with hosts.api() as client:
            _wait_for_instance(
                client,
                lambda instance: (
                    instance["state"] == "running" and instance["start_count"] == first["start_count"] + 1
                ),
                "chat running again after docker kill",
            )
            again = _instance(client)
        assert again is not None and again["host"] == host_b.address
        [restarted] = host_b.containers()
        assert restarted["Names"] != container["Names"] and restarted["State"] == "running"
        # Its log is on A, copied from B: the command first, then the engine's own output.
        log_path = Path(again["log_path"])
        wait_until(
            lambda: "Application startup complete." in log_path.read_text(errors="replace"),
            START_SECONDS,
            "the engine's output in the log on host A",
        )
        assert log_path.read_text().startswith("$ docker run --rm ")

        # Host B dies at once: every process of it, its dockerd and the container too.
        assert join is not None
        host_b.kill_every_process()
        join.wait(timeout=30)
        killed_at = time.monotonic()

        def host_b_lost() -> bool:
            with hosts.api() as client:
                workers = {
                    worker["name"]: worker for worker in client.get("/api/v1/workers").json()["workers"]
                }
            return bool(workers["host-b"]["state"] == "lost")

        wait_until(host_b_lost, START_SECONDS, "host-b lost", interval=0.1)
        lost = time.monotonic() - killed_at
        with hosts.api() as client:
            _wait_for_instance(
                client,
                lambda instance: instance["state"] == "running" and instance["host"] == host_a.address,
                "chat running on host A after host B died",
            )
        failover = time.monotonic() - killed_at
        [on_a] = host_a.containers()
        assert on_a["State"] == "running"
        assert _chat(hosts, key).status_code == 200

        # Host B back: its dockerd removes the container of the crashed host (docker run --rm).
        host_b.start_dockerd()
        assert host_b.containers() == []

        removed = hosts.cli_on_a("rm", "chat", "--wait", "--timeout", "120")
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert host_a.containers() == [] and host_b.containers() == []
        print(
            f"\nimage backend on the second host: deploy -> running on host B {to_running:.1f} s; "
            f"host B SIGKILLed -> lost {lost:.1f} s, -> running on host A {failover:.1f} s"
        )
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=90)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if join is not None and join.poll() is None:
            with_group_killed(join, signal.SIGKILL)
