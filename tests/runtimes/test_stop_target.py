"""A stop reaches the engine where its start said, and the caller says only how long to wait.

The engine is a real launcher process with a child in its process group (as vLLM's and SGLang's
launchers have), each writing down which signal reached it: with ``stop_signal_target="group"``
both get SIGTERM from the runtime; with ``"launcher"`` only the launcher does, and it ends its
child itself (SGLang's way). A restarted server's runtime, which was never told, stops the engine
it finds the same way: the process runtime reads it from the engine's environment, a Ray rank's
supervisor (on the session's simulated cluster) kept it from the start.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from modelyard.runtimes.base import EngineAddress, EngineIdentity, LaunchSpec, Runtime, SignalTarget
from modelyard.runtimes.process import ProcessRuntime

# The launcher starts a child in its own process group and says so in a file; on SIGTERM it
# writes that down, asks the child to end (with SIGWINCH) and waits for it. The child writes down
# every signal it hears and ends after the first: in a stop of the whole group both reach it,
# and one handler may run inside the other (Python runs handlers between bytecodes), so a handler
# that ended the child at once could hide the other signal from the record.
LAUNCHER = textwrap.dedent(
    """
    import pathlib, signal, subprocess, sys, time
    record = pathlib.Path(sys.argv[1])
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]])
    def on_term(number, frame):
        with record.open("a") as out:
            out.write("launcher: SIGTERM\\n")
        child.send_signal(signal.SIGWINCH)
        child.wait()
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    while not record.exists() or "child: ready" not in record.read_text():
        time.sleep(0.01)
    with record.open("a") as out:
        out.write("launcher: ready\\n")
    while True:
        time.sleep(1)
    """
)
CHILD = textwrap.dedent(
    """
    import pathlib, signal, sys, time
    record = pathlib.Path(sys.argv[1])
    heard = []
    def on(name):
        def handler(number, frame):
            with record.open("a") as out:
                out.write(f"child: {name}\\n")
            heard.append(name)
        return handler
    signal.signal(signal.SIGTERM, on("SIGTERM"))
    signal.signal(signal.SIGWINCH, on("asked by the launcher"))
    with record.open("a") as out:
        out.write("child: ready\\n")
    while not heard:
        time.sleep(0.01)
    """
)
READY_WAIT_SECONDS = 30.0


def launcher_spec(tmp_path: Path, record: Path, target: SignalTarget, owner: str) -> LaunchSpec:
    return LaunchSpec(
        identity=EngineIdentity(
            owner=owner,
            launch_token=uuid.uuid4().hex,
            deployment="chat",
            instance_uid=uuid.uuid4().hex,
            replica_index=0,
            start_number=1,
        ),
        program=[sys.executable, "-c", LAUNCHER],
        arguments=[str(record), CHILD],
        env={},
        gpu_ids=[],
        model_path=str(tmp_path),
        address=EngineAddress(bind_host="127.0.0.1", port=0, reach_host="127.0.0.1", reach_port=0),
        log_path=tmp_path / "start-1.log",
        working_directory=tmp_path / "work",
        stop_signal_target=target,
    )


async def wait_until_ready(record: Path) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_WAIT_SECONDS
    while not (record.exists() and "launcher: ready" in record.read_text()):
        assert loop.time() < deadline, f"the launcher never got ready; its log: {record.read_text()}"
        await asyncio.sleep(0.02)


@pytest.fixture(params=["process", pytest.param("ray", marks=pytest.mark.xdist_group("ray"))])
def make_runtime(request: pytest.FixtureRequest) -> Callable[[], Runtime]:
    """A fresh runtime of the kind under test (a restarted server makes its own)."""
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
        from modelyard.runtimes.ray_runtime import RayRuntime

        return RayRuntime
    return ProcessRuntime


@pytest.mark.parametrize(
    ("target", "what_the_child_heard"),
    [("group", "child: SIGTERM"), ("launcher", "child: asked by the launcher")],
)
async def test_stop_sends_sigterm_where_the_start_said(
    tmp_path: Path, target: SignalTarget, what_the_child_heard: str, make_runtime: Callable[[], Runtime]
) -> None:
    record = tmp_path / "signals.txt"
    runtime = make_runtime()
    started = await runtime.start(launcher_spec(tmp_path, record, target, uuid.uuid4().hex))
    await wait_until_ready(record)
    await runtime.stop(started.handle, grace_seconds=10)
    heard = record.read_text().splitlines()
    assert "launcher: SIGTERM" in heard
    assert what_the_child_heard in heard, heard
    if target == "launcher":
        assert "child: SIGTERM" not in heard, heard
    assert await runtime.exit_status(started.handle) is not None
    await runtime.close()


async def test_a_restarted_server_stops_a_launcher_engine_at_its_launcher_untold(
    tmp_path: Path, make_runtime: Callable[[], Runtime]
) -> None:
    record = tmp_path / "signals.txt"
    owner = uuid.uuid4().hex
    first = make_runtime()
    await first.start(launcher_spec(tmp_path, record, "launcher", owner))
    await wait_until_ready(record)
    await first.close()  # the server goes away; the engine does not
    successor = make_runtime()
    [found] = await successor.find_engines(owner)
    await successor.resume(found.handle, tmp_path / "start-1.log")
    await successor.stop(found.handle, grace_seconds=10)
    heard = record.read_text().splitlines()
    assert "child: asked by the launcher" in heard and "child: SIGTERM" not in heard, heard
    assert await successor.find_engines(owner) == []
    await successor.close()
