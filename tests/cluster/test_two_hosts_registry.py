"""An image backend on the second host, pulled there from a registry with a stored credential.

The two hosts of ``test_two_hosts_docker.py`` (network namespaces, a dockerd each; B's trusts
plain HTTP from A's subnet, ``--insecure-registry``), and Debian's ``docker-registry`` with
htpasswd auth on host A's address (pushed to through A's dockerd, on its loopback). The image is
in the registry only, not in either dockerd. In order: a deployment pinned to A from the imported
skeleton (the bystander); a deployment pinned to B of ``A:PORT/modelyard-test/pulled:1`` with the
right credential → pulled on B's dockerd (``docker image inspect`` there; events name the
worker) → running → chat through A's gateway; removed, the image removed from B and the stored
password replaced by a wrong one → deployed again: error with the registry's answer, naming B;
the bystander untouched; the pull task itself (called here against B's dockerd) sends the layers
and bytes as they come, then the result; the password nowhere in the server's log, the join's,
Ray's session logs, events or API answers.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelyard.runtimes.image_pull import RegistryAuth
from modelyard.runtimes.ray_container import pull_image_on_this_node
from modelyard.testing.cluster_process import SOURCE_FOLDER, nvml_gpu, with_group_killed
from modelyard.testing.container_image import SKELETON_TAG, host_python_mounts
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.local_registry import LocalRegistry
from modelyard.testing.serve_process import free_port, wait_until
from ray_cluster import ray_sessions_folder

from . import test_two_hosts_docker
from .test_two_hosts_docker import BACKEND_YAML, START_SECONDS, TwoDockerHosts

pytestmark = test_two_hosts_docker.pytestmark
# The two hosts (a fixture of this module too: a server and hosts of its own).
hosts = test_two_hosts_docker.hosts

USERNAME = "ci"
PASSWORD = f"registry-password-{uuid.uuid4().hex}"
WRONG_PASSWORD = f"wrong-password-{uuid.uuid4().hex}"
CREDENTIAL = "lab"
PAYLOAD_BYTES = 8 * 1024 * 1024
PULLED_YAML = """\
backend_name: vllm-pulled
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
    modelyard: {{registry_credential: {credential}, pull_policy: if-missing}}
"""


def _cli_on_a(hosts: TwoDockerHosts, *arguments: str, stdin: str | None = None, exit_code: int = 0) -> str:
    namespace = hosts.host_a.namespace
    result = subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "-m", "modelyard.cli.main", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        env=hosts.environment(hosts.host_a),
        timeout=180,
    )
    assert result.returncode == exit_code, result.stdout + result.stderr
    return result.stdout + (result.stderr if exit_code else "")


def _instance(client: httpx.Client, name: str, answers: list[str]) -> dict[str, Any] | None:
    answer = client.get(f"/api/v1/deployments/{name}")
    answers.append(answer.text)
    if answer.status_code != 200 or not answer.json()["instances"]:
        return None
    instance: dict[str, Any] = answer.json()["instances"][0]
    return instance


def _wait(hosts: TwoDockerHosts, name: str, state: str, answers: list[str]) -> dict[str, Any]:
    with hosts.api() as client:

        def reached() -> bool:
            instance = _instance(client, name, answers)
            return instance is not None and instance["state"] == state

        wait_until(reached, START_SECONDS, f"{name} {state}", interval=0.2)
        found = _instance(client, name, answers)
    assert found is not None
    return found


def _chat(hosts: TwoDockerHosts, key: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{hosts.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        trust_env=False,
        timeout=60,
        verify=shared_tls_context(),
    )


def _start_server(hosts: TwoDockerHosts) -> tuple[subprocess.Popen[bytes], int]:
    ray_port = free_port()
    arguments = ["--no-demo", "--gateway-workers", "0", "--host", "0.0.0.0", "--port", str(hosts.port)]
    arguments += ["--cluster", "--ray-port", str(ray_port), "--ray-node-ip", hosts.host_a.address]
    for mount in host_python_mounts():  # the engine double runs on this host's Python
        arguments += ["--docker-volume", f"{mount.host_path}:{mount.engine_path}:ro"]
    with (hosts.root / "serve.log").open("wb") as log:
        server = subprocess.Popen(
            [
                *("ip", "netns", "exec", hosts.host_a.namespace),
                *(sys.executable, "-m", "modelyard.cli.main", "serve", *arguments),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=hosts.with_gpus(hosts.host_a, nvml_gpu("NVIDIA L4", 0, 24)),
        )

    def answering() -> bool:
        if server.poll() is not None:
            raise AssertionError(f"serve on host A exited:\n{(hosts.root / 'serve.log').read_text()[-3000:]}")
        try:
            with hosts.api() as client:
                return client.get("/api/v1/system").status_code == 200
        except (httpx.HTTPError, FileNotFoundError):
            return False

    wait_until(answering, START_SECONDS, "the server on host A", interval=0.2)
    return server, ray_port


def _join_b(hosts: TwoDockerHosts, ray_port: int) -> subprocess.Popen[bytes]:
    root, host_b = hosts.root, hosts.host_b
    with (root / "join.log").open("wb") as log:
        join = subprocess.Popen(
            [
                *("ip", "netns", "exec", host_b.namespace, sys.executable, "-m", "modelyard.cli.main"),
                *("worker", "join", f"{hosts.host_a.address}:{ray_port}"),
                *("--token-file", str(root / "data" / "cluster-token"), "--name", "host-b"),
                *("--node-ip", host_b.address),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=hosts.with_gpus(host_b, nvml_gpu("NVIDIA L40S", 0, 48)),
            start_new_session=True,
        )

    def ready() -> bool:
        if join.poll() is not None:
            raise AssertionError(f"worker join on host B exited:\n{(root / 'join.log').read_text()}")
        with hosts.api() as client:
            workers = {worker["name"]: worker for worker in client.get("/api/v1/workers").json()["workers"]}
        found = workers.get("host-b")
        return found is not None and found["state"] == "ready" and bool(found["gpus"])

    wait_until(ready, START_SECONDS, "host-b ready", interval=0.2)
    return join


def test_an_image_is_pulled_on_the_second_hosts_dockerd_with_the_stored_credential(
    hosts: TwoDockerHosts, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host_a, host_b, root = hosts.host_a, hosts.host_b, hosts.root
    test_started = time.time()
    answers: list[str] = []
    prefix = ("ip", "netns", "exec", host_a.namespace)
    registry_root = root / "registry"
    with LocalRegistry.start(
        registry_root,
        username=USERNAME,
        password=PASSWORD,
        prefix=prefix,
        listen_host="0.0.0.0",
        probe_host=hosts.api_address,
    ) as registry:
        pushed = registry.push_new_image(
            "modelyard-test/pulled:1", payload_bytes=PAYLOAD_BYTES, docker_host=host_a.socket
        )
        image = pushed.replace(registry.host, f"{host_a.address}:{registry.port}", 1)
        assert host_b.docker("image", "inspect", image, check=False).returncode != 0
        server, ray_port = _start_server(hosts)
        join: subprocess.Popen[bytes] | None = None
        try:
            join = _join_b(hosts, ray_port)
            with hosts.api() as client:
                workers = client.get("/api/v1/workers").json()["workers"]
            [name_of_a] = [worker["name"] for worker in workers if worker["name"] != "host-b"]
            python_folder = Path(sys.executable).parent
            source = str(Path(SOURCE_FOLDER))
            skeleton = BACKEND_YAML.format(image=SKELETON_TAG, source=source, python_folder=python_folder)
            pulled_yaml = PULLED_YAML.format(
                image=image, source=source, python_folder=python_folder, credential=CREDENTIAL
            )
            registry_address = f"{host_a.address}:{registry.port}"
            add = ["backends", "credentials", "add", CREDENTIAL, "--registry", registry_address]
            add += ["--username", USERNAME, "--password-stdin"]
            _cli_on_a(hosts, *add, stdin=PASSWORD)
            with hosts.api() as client:
                for text in (skeleton, pulled_yaml):
                    imported = client.post("/api/v1/backends/import", content=text)
                    assert imported.status_code in (200, 201), imported.text
                added = client.post("/api/v1/models", json={"path": str(tiny_model_dir), "name": "tiny"})
                assert added.status_code == 201, added.text
            # The bystander, on A from the imported image.
            deploy = ["deploy", "tiny", "--gpus", "1", "--skip-verification"]
            _cli_on_a(hosts, *deploy, "--name", "steady", "--backend", "vllm-image", "--worker", name_of_a)
            steady = _wait(hosts, "steady", "running", answers)
            assert steady["host"] == host_a.address
            key = _cli_on_a(hosts, "keys", "create", "me", "--rotate").strip()

            # Right credential: pulled on B's own dockerd, then started there.
            deploy_started = time.monotonic()
            _cli_on_a(hosts, *deploy, "--name", "pulled", "--backend", "vllm-pulled", "--worker", "host-b")
            running = _wait(hosts, "pulled", "running", answers)
            to_running_seconds = time.monotonic() - deploy_started
            assert running["host"] == host_b.address and running["runtime"] == "ray"
            inspected = json.loads(host_b.docker("image", "inspect", image).stdout)[0]
            assert image in inspected["RepoTags"]
            assert host_a.docker("image", "inspect", image, check=False).returncode != 0
            pull = running["image_pull"]
            assert pull["state"] == "pulled" and pull["worker"] == "host-b", pull
            assert pull["downloaded_bytes"] >= PAYLOAD_BYTES // 2  # compressed random bytes: about as many
            with hosts.api() as client:
                events = client.get("/api/v1/deployments/pulled/events").json()
            answers.append(json.dumps(events))
            reasons = [str(event["reason"]) for event in events]
            assert any(reason.startswith(f"pulling image {image} on worker host-b") for reason in reasons)
            [pulled_line] = [reason for reason in reasons if reason.startswith(f"pulled {image}: ")]
            assert pulled_line.endswith(" on worker host-b")
            answer = _chat(hosts, key, "pulled")
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"]
            _cli_on_a(hosts, "rm", "pulled", "--wait", "--timeout", "120")
            assert host_b.containers() == []

            # Wrong credential: the registry's answer, on B; the bystander untouched.
            host_b.docker("image", "rm", image)
            _cli_on_a(hosts, *add, "--replace", stdin=WRONG_PASSWORD)
            # The CLI follows the start and says why it failed.
            said = _cli_on_a(
                hosts,
                *deploy,
                "--name",
                "pulled",
                "--backend",
                "vllm-pulled",
                "--worker",
                "host-b",
                exit_code=1,
            )
            assert f"cannot pull image {image} on worker host-b: the registry answered: unauthorized" in said
            answers.append(said)
            failed = _wait(hosts, "pulled", "error", answers)
            reason = failed["reason"]
            assert f"cannot pull image {image} on worker host-b" in reason, reason
            assert "unauthorized" in reason.lower() or "authentication required" in reason.lower(), reason
            assert failed["image_pull"]["state"] == "failed"
            assert host_b.docker("image", "inspect", image, check=False).returncode != 0
            assert host_b.containers() == []
            still = _wait(hosts, "steady", "running", answers)
            assert still["start_count"] == steady["start_count"]
            assert _chat(hosts, key, "steady").status_code == 200
            # What the pull task on a node sends back while it pulls: layers and bytes, then the result.
            monkeypatch.setenv("DOCKER_HOST", host_b.socket)
            right = RegistryAuth(registry_address, USERNAME, PASSWORD, name=CREDENTIAL)
            first, *progress, last = list(pull_image_on_this_node(image, "if-missing", right))
            assert PASSWORD not in repr(right)
            assert first == {"pulling": True}
            assert progress and all(set(message) == {"progress", "text"} for message in progress)
            assert progress[-1]["progress"]["layers_done"] == progress[-1]["progress"]["layers_total"] >= 1
            assert last["result"]["downloaded_bytes"] >= PAYLOAD_BYTES // 2, last
            assert host_b.docker("image", "inspect", image, check=False).returncode == 0
            # Now there: nothing pulled, nothing said but that.
            present = list(pull_image_on_this_node(image, "if-missing", right))
            assert present == [{"result": None, "daemon": host_b.socket}]
            with hosts.api() as client:
                for url in ("/api/v1/deployments/pulled/events", "/api/v1/registry-credentials"):
                    answers.append(client.get(url).text)
            answers.append(_cli_on_a(hosts, "ps", "pulled"))
            print(
                f"\nimage pulled on host B: {pulled_line} ({pull['downloaded_bytes']} bytes, "
                f"{pull['seconds']:.2f} s); deploy -> running on host B {to_running_seconds:.1f} s "
                "(pull included)"
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
    secrets = (PASSWORD, WRONG_PASSWORD)
    for text in answers:
        assert not any(secret in text for secret in secrets)
    logs = [root / "serve.log", root / "join.log", *(root / "data").rglob("*.log")]
    logs += [
        path
        for path in ray_sessions_folder().glob("session_*/logs/*")
        if path.is_file() and path.stat().st_mtime >= test_started
    ]
    for path in logs:
        content = path.read_bytes()
        assert not any(secret.encode() in content for secret in secrets), path
