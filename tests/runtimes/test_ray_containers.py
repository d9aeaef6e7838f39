"""An image backend's container on a Ray node lives only as long as its supervisor: a supervisor
that dies (its worker process killed, its node's raylet gone) takes the container with it, by
the guard it started (``runtimes/container_guard.py``); an image that is not on the node's Docker
engine is named with the node. Real parts: the session's simulated Ray cluster and this host's
dockerd."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from modelyard.errors import EngineStartFailed
from modelyard.runtimes.docker import DockerRuntime
from modelyard.runtimes.ray_connection import NAMESPACE
from modelyard.runtimes.ray_names import GangName
from modelyard.runtimes.ray_runtime import RayRuntime
from ray_cluster import SimulatedCluster

from .conftest import RuntimeUnderTest, docker_options, wait_until_healthy

GONE_WAIT_SECONDS = 30.0


def _containers(owner: str) -> list[str]:
    output = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=modelyard.owner={owner}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return output.split()


async def test_a_container_whose_supervisor_dies_is_removed_from_its_node(
    ray_cluster: SimulatedCluster, skeleton_image: str, tmp_path: Path
) -> None:
    import ray

    owner = uuid.uuid4().hex
    under = RuntimeUnderTest(
        "ray-docker", lambda: RayRuntime(docker_options=docker_options()), skeleton_image, owner, tmp_path
    )
    runtime = RayRuntime(docker_options=docker_options())
    spec = await under.spec(runtime=runtime)
    started = await runtime.start(spec)
    try:
        await wait_until_healthy(spec.address)
        assert len(_containers(owner)) == 1
        supervisor = ray.get_actor(GangName.from_handle(started.handle).actor(0), namespace=NAMESPACE)
        ray.kill(supervisor, no_restart=True)  # as when its worker process is killed
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GONE_WAIT_SECONDS
        while _containers(owner):
            if loop.time() > deadline:
                ps = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
                guards = [line for line in ps.splitlines() if "container_guard" in line]
                pytest.fail(f"the container outlived its supervisor: {_containers(owner)}; guards: {guards}")
            await asyncio.sleep(0.1)
        status = await runtime.exit_status(started.handle)
        assert status is not None and "its supervisor is gone" in status.describe()
    finally:
        await runtime.stop(started.handle, grace_seconds=5)
        await runtime.close()
        leftovers = _containers(owner)
        if leftovers:
            subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True, check=False)


async def test_an_image_missing_on_the_node_is_named_with_the_node_and_leaves_nothing(
    ray_cluster: SimulatedCluster, skeleton_image: str, tmp_path: Path
) -> None:
    owner = uuid.uuid4().hex
    under = RuntimeUnderTest(
        "ray-docker", lambda: RayRuntime(docker_options=docker_options()), skeleton_image, owner, tmp_path
    )
    runtime = RayRuntime(docker_options=docker_options())
    spec = await under.spec(runtime=runtime)
    absent = replace(spec, image="modelyard-test-absent:0")
    with pytest.raises(EngineStartFailed) as raised:
        await runtime.start(absent)
    await runtime.close()
    assert raised.value.message.startswith(
        "image modelyard-test-absent:0 is not on worker head's Docker engine (No such image"
    )
    assert raised.value.hint is not None and "docker load" in raised.value.hint
    assert _containers(owner) == []


async def test_a_restarted_server_s_docker_runtime_leaves_a_supervisors_container_to_ray(
    ray_cluster: SimulatedCluster, skeleton_image: str, tmp_path: Path
) -> None:
    """On the server's own node both runtimes see the container (one dockerd, one owner): only the
    Ray runtime may claim it, or the orphan sweep of a restarted server would stop it."""
    owner = uuid.uuid4().hex
    under = RuntimeUnderTest(
        "ray-docker", lambda: RayRuntime(docker_options=docker_options()), skeleton_image, owner, tmp_path
    )
    runtime = RayRuntime(docker_options=docker_options())
    spec = await under.spec(runtime=runtime)
    started = await runtime.start(spec)
    try:
        assert [found.identity for found in await runtime.find_engines(owner)] == [spec.identity]
        assert await DockerRuntime(docker_options()).find_engines(owner) == []
    finally:
        await runtime.stop(started.handle, grace_seconds=5)
        await runtime.close()
