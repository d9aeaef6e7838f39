"""Runtimes under test: the real ones, engine processes on this host, containers on a real
Docker engine (``dockerd``, which ``.ci/run`` starts), supervisor actors on a real Ray cluster
(the session's simulated one, ``tests/ray_cluster.py``: engines on its head node; ``ray-docker``:
an image backend's container run by the supervisor through that node's Docker engine), and the
runtime double the controller's tests use (``testing/runtime_double.py``: engines on threads of
this process), held to the same contract. The engine in all of them is the project's engine
double (``python -m modelyard.bench.reference_server``, playing vLLM); in a container it runs on
this host's Python, bind-mounted into an imported skeleton image (nothing is ever pulled).

Docker missing is a skip here and a failure under CI (``CI=true``), as PostgreSQL is.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from modelyard.runtimes.base import EngineAddress, EngineIdentity, LaunchSpec, Runtime
from modelyard.runtimes.docker import DockerOptions, DockerRuntime, container_model_path
from modelyard.runtimes.process import ProcessRuntime
from modelyard.testing.container_image import host_python_mounts, import_skeleton_image, project_source_folder
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.ports import reserved_port_window
from modelyard.testing.runtime_double import EngineHostDouble, InMemoryRuntimeDouble

ENGINE_DOUBLE = [sys.executable, "-m", "modelyard.bench.reference_server"]
HEALTH_WAIT_SECONDS = 60.0


def _docker_problem() -> str | None:
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"dockerd is not usable: {probe.stderr.strip().splitlines()[-1:] or 'no output'}"
    return None


@pytest.fixture(scope="session")
def skeleton_image() -> str:
    """The test image (a skeleton root file system), imported once; skips without Docker."""
    problem = _docker_problem()
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(
                f"Docker is required under CI: {problem} (.ci/run installs docker.io and starts dockerd)"
            )
        pytest.skip(problem)
    return import_skeleton_image()


def docker_options() -> DockerOptions:
    return DockerOptions(extra_volumes=tuple(host_python_mounts()))


@dataclass
class RuntimeUnderTest:
    """One runtime kind: how to make a fresh runtime (a restarted server makes its own) and a spec.
    ``kind`` names the case (``memory``: the double); ``handle_kind`` is the kind its handles carry."""

    kind: str
    make: Callable[[], Runtime]
    image: str | None
    owner: str
    tmp_path: Path
    handle_kind: str = ""
    # The double's host (what a test does to its engines from outside), for the ``memory`` case.
    host: EngineHostDouble | None = None

    def __post_init__(self) -> None:
        self.handle_kind = self.handle_kind or self.kind

    async def spec(
        self, *arguments: str, runtime: Runtime, secrets: frozenset[str] = frozenset()
    ) -> LaunchSpec:
        model_dir = self.tmp_path / "model dir"
        model_dir.mkdir(exist_ok=True)
        address = await runtime.allocate_address("127.0.0.1")
        start = len(list(self.tmp_path.glob("instance/start-*.log"))) + 1
        engine_arguments = [
            "vllm",
            "serve",
            container_model_path(str(model_dir)) if self.image else runtime.engine_model_path(str(model_dir)),
            "--host",
            address.bind_host,
            "--port",
            str(address.port),
            "--served-model-name",
            "chat",
            *arguments,
        ]
        return LaunchSpec(
            identity=EngineIdentity(
                owner=self.owner,
                launch_token=uuid.uuid4().hex,
                deployment="chat",
                instance_uid=uuid.uuid4().hex,
                replica_index=0,
                start_number=start,
            ),
            program=ENGINE_DOUBLE,
            arguments=engine_arguments,
            env={"PYTHONPATH": project_source_folder(), "OMP_NUM_THREADS": "1"},
            gpu_ids=[],
            model_path=str(model_dir),
            address=address,
            log_path=self.tmp_path / "instance" / f"start-{start}.log",
            working_directory=self.tmp_path / "instance" / "work",
            image=self.image,
            secrets=secrets,
        )


@pytest.fixture(
    params=[
        "process",
        "memory",
        # Asked for with getfixturevalue below, so named here for pytest -n (tests/parallel_groups.py);
        # ray-docker's group builds a simulated cluster of its own, beside the ray group's.
        pytest.param("docker", marks=pytest.mark.xdist_group("docker")),
        pytest.param("ray", marks=pytest.mark.xdist_group("ray")),
        pytest.param("ray-docker", marks=pytest.mark.xdist_group("ray-docker")),
    ]
)
def runtime_under_test(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RuntimeUnderTest]:
    owner = uuid.uuid4().hex
    if request.param == "process":
        # Engine ports from this test process's own slice (testing/ports.py), not the kernel's
        # pick of a free port, which any outgoing connection on the host may take before the
        # engine binds it; a restarted server's runtime is given the same window.
        window = reserved_port_window(4)
        yield RuntimeUnderTest("process", lambda: ProcessRuntime(engine_ports=window), None, owner, tmp_path)
        return
    if request.param == "memory":
        host = EngineHostDouble()
        yield RuntimeUnderTest(
            "memory", lambda: InMemoryRuntimeDouble(host), None, owner, tmp_path, "process", host
        )
        host.shut_down()  # whatever a failed test left running
        return
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
        from modelyard.runtimes.ray_runtime import RayRuntime

        yield RuntimeUnderTest("ray", RayRuntime, None, owner, tmp_path)
        return
    image = request.getfixturevalue("skeleton_image")
    if request.param == "ray-docker":
        request.getfixturevalue("ray_cluster")
        from modelyard.runtimes.ray_runtime import RayRuntime

        def make() -> Runtime:
            return RayRuntime(docker_options=docker_options())

        yield RuntimeUnderTest("ray-docker", make, image, owner, tmp_path, "ray")
    else:
        yield RuntimeUnderTest("docker", lambda: DockerRuntime(docker_options()), image, owner, tmp_path)
    # Whatever a failed test left behind.
    leftovers = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=modelyard.owner={owner}"], capture_output=True, text=True
    ).stdout.split()
    if leftovers:
        subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True, check=False)


async def wait_until_healthy(address: EngineAddress) -> None:
    """Poll the engine's /health until it answers 200 (an engine gives no other signal)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HEALTH_WAIT_SECONDS
    async with httpx.AsyncClient(trust_env=False, verify=shared_tls_context()) as client:
        while True:
            try:
                if (await client.get(address.base_url + "/health", timeout=2.0)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if loop.time() > deadline:
                raise AssertionError(f"the engine at {address.base_url} never answered /health")
            await asyncio.sleep(0.05)
