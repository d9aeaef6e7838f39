"""The Runtime contract, run against every runtime (``runtimes/base.py`` says what each method
promises). Each test starts a real engine (a process on this host, a container on Docker, a
supervisor actor's process on a Ray node, or its container: ``ray-docker``), or, for the runtime
double the controller's tests use, an engine on a thread of this process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess

import httpx
import psutil
import pytest

from modelyard.errors import EngineStartFailed
from modelyard.runtimes.base import EngineHandle, ExitStatus, Runtime
from modelyard.runtimes.engine_environment import ENV_OWNER
from modelyard.runtimes.ray_runtime import RayRuntime
from modelyard.testing.http_clients import shared_tls_context
from modelyard.testing.runtime_double import InMemoryRuntimeDouble

from .conftest import RuntimeUnderTest, wait_until_healthy

EXIT_WAIT_SECONDS = 30.0


async def wait_for_exit(runtime: Runtime, handle: EngineHandle) -> ExitStatus:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + EXIT_WAIT_SECONDS
    while (status := await runtime.exit_status(handle)) is None:
        if loop.time() > deadline:
            raise AssertionError(f"{handle.label} did not exit")
        await asyncio.sleep(0.05)
    return status


async def kill_engine(kind: str, runtime: Runtime, handle: EngineHandle) -> None:
    """SIGKILL the engine from outside, as the OOM killer or an operator would."""
    if kind == "memory":
        assert isinstance(runtime, InMemoryRuntimeDouble)
        await runtime.host.kill(handle)
    elif kind == "process":
        launcher = runtime.host_process(handle)
        assert launcher is not None
        os.killpg(launcher[0], signal.SIGKILL)
    elif kind == "ray":
        assert isinstance(runtime, RayRuntime)
        pid = (await runtime.engine_pids(handle))[0]
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)  # the simulated nodes run on this host
    elif kind == "ray-docker":
        assert isinstance(runtime, RayRuntime)
        name = await runtime.container_name(handle)
        subprocess.run(["docker", "kill", str(name)], capture_output=True, check=True)
    else:
        subprocess.run(["docker", "kill", handle.id], capture_output=True, check=True)


def engine_left(under_test: RuntimeUnderTest) -> list[str]:
    """Anything of this owner's engines still there: processes (zombies included), supervisor
    actors, containers, or the double's engines."""
    kind, owner = under_test.kind, under_test.owner
    if under_test.host is not None:
        return [engine.handle.label for engine in under_test.host.engines() if engine.identity.owner == owner]
    if kind in ("process", "ray"):
        left = []
        for process in psutil.process_iter(["pid", "status"]):
            try:
                if process.environ().get(ENV_OWNER) == owner:
                    left.append(f"pid {process.pid} ({process.info['status']})")
            except psutil.Error:
                continue
        if kind == "ray":
            left += ray_actors_left(owner)
        return left
    output = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=modelyard.owner={owner}"], capture_output=True, text=True
    ).stdout
    return output.split() + (ray_actors_left(owner) if kind == "ray-docker" else [])


def ray_actors_left(owner: str) -> list[str]:
    import ray

    return [
        f"actor {entry['name']}"
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if owner in entry["name"]
    ]


async def test_started_engine_answers_where_the_runtime_says(runtime_under_test: RuntimeUnderTest) -> None:
    runtime = runtime_under_test.make()
    spec = await runtime_under_test.spec(runtime=runtime)
    started = await runtime.start(spec)
    try:
        assert started.handle.runtime == runtime_under_test.handle_kind
        await wait_until_healthy(spec.address)
        async with httpx.AsyncClient(trust_env=False, verify=shared_tls_context()) as client:
            models = (await client.get(spec.address.base_url + "/v1/models")).json()
        assert [model["id"] for model in models["data"]] == ["chat"]
        assert await runtime.exit_status(started.handle) is None
    finally:
        await runtime.stop(started.handle, grace_seconds=10)
        await runtime.close()


async def test_only_an_engine_of_this_host_names_a_host_process(runtime_under_test: RuntimeUnderTest) -> None:
    runtime = runtime_under_test.make()
    spec = await runtime_under_test.spec(runtime=runtime)
    started = await runtime.start(spec)
    try:
        launcher = runtime.host_process(started.handle)
        if runtime_under_test.kind == "process":
            assert launcher is not None
            pid, start_time = launcher
            assert psutil.Process(pid).environ().get(ENV_OWNER) == runtime_under_test.owner
            assert abs(psutil.Process(pid).create_time() - start_time) < 1.0
        else:  # a container, a Ray rank on its node, a thread of the double
            assert launcher is None
    finally:
        await runtime.stop(started.handle, grace_seconds=10)
        await runtime.close()


async def test_the_log_holds_the_engine_output_with_the_command_and_every_secret_masked(
    runtime_under_test: RuntimeUnderTest,
) -> None:
    runtime = runtime_under_test.make()
    spec = await runtime_under_test.spec(
        "--api-key", "s3cret-canary", runtime=runtime, secrets=frozenset({"s3cret-canary"})
    )
    started = await runtime.start(spec)
    try:
        await wait_until_healthy(spec.address)
    finally:
        await runtime.stop(started.handle, grace_seconds=10)
        await runtime.close()
    text = spec.log_path.read_text()
    first_line = text.splitlines()[0]
    assert first_line.startswith("$ ") and "--api-key '********'" in first_line
    assert "s3cret-canary" not in first_line
    assert "Application startup complete." in text
    # The engine prints its own arguments, the key among them (as vLLM does): masked too.
    assert "non-default args: {" in text and "'api_key': ['********']" in text
    assert "s3cret-canary" not in text
    assert oct(spec.log_path.stat().st_mode & 0o777) == "0o600"


async def test_a_restarted_server_finds_its_engine_by_identity_and_only_its_own(
    runtime_under_test: RuntimeUnderTest,
) -> None:
    first = runtime_under_test.make()
    spec = await runtime_under_test.spec(runtime=first)
    started = await first.start(spec)
    await first.close()  # the server goes away; the engine does not
    successor = runtime_under_test.make()
    try:
        [found] = await successor.find_engines(runtime_under_test.owner)
        assert found.identity == spec.identity
        assert found.handle.id == started.handle.id
        assert await successor.find_engines("another-installation") == []
        await successor.resume(found.handle, spec.log_path)
        assert await successor.exit_status(found.handle) is None
        await wait_until_healthy(spec.address)
    finally:
        await successor.stop(started.handle, grace_seconds=10)
        await successor.close()


async def test_stop_leaves_nothing_behind(runtime_under_test: RuntimeUnderTest) -> None:
    runtime = runtime_under_test.make()
    spec = await runtime_under_test.spec(runtime=runtime)
    started = await runtime.start(spec)
    await wait_until_healthy(spec.address)
    await runtime.stop(started.handle, grace_seconds=10)
    assert engine_left(runtime_under_test) == []
    assert await runtime.exit_status(started.handle) is not None
    assert await runtime.find_engines(runtime_under_test.owner) == []
    await runtime.close()


async def test_an_engine_that_fails_at_start_reports_its_exit_code(
    runtime_under_test: RuntimeUnderTest,
) -> None:
    runtime = runtime_under_test.make()
    spec = await runtime_under_test.spec("--fail-start", "CUDA out of memory", runtime=runtime)
    started = await runtime.start(spec)
    status = await wait_for_exit(runtime, started.handle)
    await runtime.stop(started.handle, grace_seconds=5)
    await runtime.close()
    assert status.exit_code == 1 and status.signal_number is None
    assert "CUDA out of memory" in spec.log_path.read_text()


async def test_an_engine_killed_from_outside_reports_the_signal(runtime_under_test: RuntimeUnderTest) -> None:
    runtime = runtime_under_test.make()
    spec = await runtime_under_test.spec(runtime=runtime)
    started = await runtime.start(spec)
    await wait_until_healthy(spec.address)
    await kill_engine(runtime_under_test.kind, runtime, started.handle)
    status = await wait_for_exit(runtime, started.handle)
    await runtime.stop(started.handle, grace_seconds=5)
    await runtime.close()
    assert status.signal_number == signal.SIGKILL, status.describe()
    assert "killed by SIGKILL" in status.describe()
    assert engine_left(runtime_under_test) == []


async def test_a_start_that_cannot_launch_says_why_and_leaves_nothing(
    runtime_under_test: RuntimeUnderTest,
) -> None:
    runtime = runtime_under_test.make()
    spec = await runtime_under_test.spec(runtime=runtime)
    if runtime_under_test.image is None:
        broken = type(spec)(**{**spec.__dict__, "program": ["/nonexistent/engine"]})
        expected = "executable not found"
    else:
        broken = type(spec)(**{**spec.__dict__, "image": "modelyard-test-absent:0"})
        expected = "modelyard-test-absent:0"
    with pytest.raises(EngineStartFailed, match=expected) as raised:
        await runtime.start(broken)
    await runtime.close()
    assert raised.value.message in spec.log_path.read_text() or expected in spec.log_path.read_text()
    assert engine_left(runtime_under_test) == []
