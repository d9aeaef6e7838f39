"""A restarted server's scan finds an engine the moment the process runtime's start has returned.

``Popen`` returns once the kernel has replaced the child's memory in ``execve``, a moment before
the new program's arguments and environment are laid out: a scan in that moment read an empty
``/proc/<pid>/environ`` and missed the engine (the contract test's restarted server then found
none, and the engine's log held only its command line). The window is short, so the test starts
many engines (each a sleeping Python, which is all the scan needs) and scans after each start.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from modelyard.runtimes.base import EngineAddress, EngineIdentity, LaunchSpec
from modelyard.runtimes.process import ProcessRuntime

STARTS = 60
SLEEPING_ENGINE = [sys.executable, "-c", "import time; time.sleep(60)"]


def _spec(tmp_path: Path, owner: str, start_number: int) -> LaunchSpec:
    return LaunchSpec(
        identity=EngineIdentity(
            owner=owner,
            launch_token=uuid.uuid4().hex,
            deployment="chat",
            instance_uid=uuid.uuid4().hex,
            replica_index=0,
            start_number=start_number,
        ),
        program=SLEEPING_ENGINE,
        arguments=[],
        env={},
        gpu_ids=[],
        model_path=str(tmp_path),
        # Never bound: the sleeping engine serves nothing, and the scan does not look at ports.
        address=EngineAddress(bind_host="127.0.0.1", port=1, reach_host="127.0.0.1", reach_port=1),
        log_path=tmp_path / f"start-{start_number}.log",
        working_directory=tmp_path / "work",
    )


async def test_an_engine_is_found_by_a_scan_right_after_its_start(tmp_path: Path) -> None:
    owner = uuid.uuid4().hex
    runtime = ProcessRuntime()
    missed = []
    try:
        for start_number in range(1, STARTS + 1):
            started = await runtime.start(_spec(tmp_path, owner, start_number))
            found = await ProcessRuntime().find_engines(owner)  # a restarted server's runtime
            if [engine.handle.id for engine in found] != [started.handle.id]:
                missed.append(start_number)
            await runtime.stop(started.handle, grace_seconds=5)
    finally:
        for engine in await runtime.find_engines(owner):
            await runtime.stop(engine.handle, grace_seconds=5)
    assert missed == [], f"the scan right after these of {STARTS} starts did not find the engine: {missed}"
