"""A container backend through ``modelyard serve`` and a real Docker engine, as a user deploys one.

The backend is GPUStack YAML with ``image_name`` and ``entrypoint``, imported unchanged; the image
is the test skeleton, with this host's Python mounted by ``--docker-volume`` (nothing is pulled);
the engine is the project's engine double playing vLLM. The steps run in order, on one server:
deploy and chat through the gateway; ``docker kill`` and the restart with its reason; a server
SIGKILL and the re-adoption of the same container; a ``docker run`` killed half-way (its container
is removed, not orphaned); ``rm`` leaving no container.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelyard.testing.container_image import host_python_mounts, project_source_folder
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.serve_process import ServeProcess, wait_until
from modelyard.testing.tiny_model import build_tiny_qwen3

pytestmark = pytest.mark.slow

RUNNING_SECONDS = 120.0
# The real CLI, wrapped: when the marker file exists, one `docker run` creates and starts its
# container, then the CLI is SIGKILLed before it prints the id (as an OOM kill would do).
DOCKER_KILLED_HALF_WAY = """#!/bin/sh
if [ "$1" = "run" ] && [ -e "{marker}" ]; then
  rm -f "{marker}"
  {docker} "$@" > /dev/null
  kill -9 $$
fi
exec {docker} "$@"
"""


def backend_yaml(image: str) -> str:
    return f"""\
backend_name: vllm-in-docker
default_version: "1.0"
health_check_path: /health
version_configs:
  "1.0":
    image_name: {image}
    entrypoint: python3 -m modelyard.bench.reference_server
    run_command: vllm serve {{{{model_path}}}} --host {{{{worker_ip}}}} --port {{{{port}}}}
      --served-model-name {{{{model_name}}}}
    custom_framework: cpu
    env:
      PYTHONPATH: {project_source_folder()}
      PATH: {Path(sys.executable).parent}:/usr/bin
"""


def containers(owner: str, *, all_states: bool = True) -> list[dict[str, Any]]:
    arguments = [
        "docker",
        "ps",
        "--no-trunc",
        "--format",
        "{{json .}}",
        "--filter",
        f"label=modelyard.owner={owner}",
    ]
    if all_states:
        arguments.insert(2, "--all")
    output = subprocess.run(arguments, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in output.splitlines() if line.strip()]


@dataclass
class DockerServe:
    """The server under test, with what the steps need: how it was started, a gateway key, and
    the marker that makes the next `docker run` die half-way."""

    process: ServeProcess
    arguments: list[str]
    key: str
    kill_next_docker_run: Path

    def restart_after_sigkill(self) -> None:
        self.process.kill()
        self.process.start(*self.arguments)
        self.process.wait_until_answering()


def _docker_wrapper(folder: Path, marker: Path) -> None:
    folder.mkdir()
    wrapper = folder / "docker"
    real_docker = subprocess.check_output(["which", "docker"], text=True).strip()
    wrapper.write_text(DOCKER_KILLED_HALF_WAY.format(marker=marker, docker=real_docker))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, skeleton_image: str) -> Iterator[DockerServe]:
    root = tmp_path_factory.mktemp("docker-serve")
    marker = root / "kill-next-docker-run"
    _docker_wrapper(root / "bin", marker)
    arguments = ["--no-demo"]
    for mount in host_python_mounts():
        arguments += ["--docker-volume", f"{mount.host_path}:{mount.engine_path}:ro"]
    process = ServeProcess(
        data_dir=root / "data", extra_env={"PATH": f"{root / 'bin'}:{os.environ.get('PATH', '')}"}
    )
    process.start(*arguments)
    process.wait_until_answering()
    model_dir = build_tiny_qwen3(root / "tiny model")
    with process.api() as client:
        imported = client.post("/api/v1/backends/import", content=backend_yaml(skeleton_image))
        assert imported.status_code in (200, 201), imported.text
        assert client.post("/api/v1/models", json={"path": str(model_dir), "name": "tiny"}).status_code == 201
        created = client.post(
            "/api/v1/deployments",
            json={"model": "tiny", "name": "boxed", "backend": "vllm-in-docker", "skip_verification": True},
        )
        assert created.status_code == 201, created.text
        key = client.post("/api/v1/keys", json={"name": "docker-test"}).json()["key"]
    try:
        yield DockerServe(process, arguments, key, marker)
    finally:
        process.stop()


def instances(server: DockerServe) -> list[dict[str, Any]]:
    with server.process.api() as client:
        response = client.get("/api/v1/deployments/boxed")
    return list(response.json()["instances"]) if response.status_code == 200 else []


def running(server: DockerServe, count: int = 1) -> bool:
    return sum(1 for instance in instances(server) if instance["state"] == "running") == count


def owner(server: DockerServe) -> str:
    return (server.process.data_dir / "server-id").read_text().strip()


def chat(server: DockerServe) -> httpx.Response:
    return httpx.post(
        f"{server.process.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {server.key}"},
        json={"model": "boxed", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4},
        timeout=30,
        trust_env=False,
        verify=shared_tls_context(),
    )


def test_the_container_runs_and_answers_through_the_gateway(server: DockerServe) -> None:
    wait_until(lambda: running(server), RUNNING_SECONDS, "the container running")
    [instance] = instances(server)
    assert instance["runtime"] == "docker"
    assert instance["engine"].startswith("container modelyard-boxed-0-1-")
    model_mount = next(mount for mount in instance["mounts"] if mount["engine_path"].startswith("/models/"))
    assert model_mount == {
        "host_path": model_mount["host_path"],
        "engine_path": "/models/tiny model",
        "read_only": True,
    }
    assert "--gpus" not in instance["command"] and "--network" in instance["command"]
    [container] = containers(owner(server), all_states=False)
    assert container["ID"] == instance["engine_id"]
    response = chat(server)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"]


def test_docker_kill_restarts_the_replica_with_the_reason(server: DockerServe) -> None:
    [before] = instances(server)
    subprocess.run(["docker", "kill", before["engine_id"]], check=True, capture_output=True)
    wait_until(
        lambda: any(i["restart_count"] >= 1 and i["state"] == "running" for i in instances(server)),
        RUNNING_SECONDS,
        "a new container running after docker kill",
    )
    [after] = instances(server)
    assert after["engine_id"] != before["engine_id"]
    with server.process.api() as client:
        events = client.get("/api/v1/deployments/boxed/events").json()
    assert any(
        "engine killed by SIGKILL" in event["reason"] and "while running" in event["reason"]
        for event in events
    )
    assert [c["ID"] for c in containers(owner(server))] == [after["engine_id"]]  # the killed one is removed


def test_a_killed_server_readopts_the_same_container(server: DockerServe) -> None:
    [before] = instances(server)
    server.restart_after_sigkill()
    wait_until(lambda: chat(server).status_code == 200, RUNNING_SECONDS, "the gateway answering again")
    [after] = instances(server)
    assert after["engine_id"] == before["engine_id"] and after["state"] == "running"
    assert "re-adopted engine container" in after["reason"]
    assert len(containers(owner(server))) == 1


def test_a_docker_run_killed_half_way_leaves_no_orphan(server: DockerServe) -> None:
    server.kill_next_docker_run.touch()
    with server.process.api() as client:
        assert client.patch("/api/v1/deployments/boxed", json={"replicas": 2}).status_code == 200
    wait_until(lambda: running(server, 2), RUNNING_SECONDS, "two replicas running")
    assert not server.kill_next_docker_run.exists()
    with server.process.api() as client:
        events = client.get("/api/v1/deployments/boxed/events").json()
    assert any("cannot launch: cannot start the container" in event["reason"] for event in events)
    ids = sorted(c["ID"] for c in containers(owner(server)))
    assert ids == sorted(i["engine_id"] for i in instances(server))


def test_rm_leaves_no_container(server: DockerServe) -> None:
    with server.process.api() as client:
        assert client.delete("/api/v1/deployments/boxed").status_code == 202
    wait_until(lambda: not instances(server), RUNNING_SECONDS, "boxed removed")
    assert containers(owner(server)) == []
