"""The runtimes' memory of how engines ended is bounded: an old entry goes, a recent one stays.

First the memo itself on a clock the test moves (``ExitMemo``, by age and by count), then the
process runtime with real engines: the exit code of an engine that ended long ago is forgotten
(it reads as "status unknown", as an engine of another server would), that of one that just
ended is still given, the same on every ask.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest

from modelyard.runtimes.base import EngineAddress, EngineHandle, EngineIdentity, ExitStatus, LaunchSpec
from modelyard.runtimes.exit_memo import ExitMemo
from modelyard.runtimes.process import ProcessRuntime

EXIT_WAIT_SECONDS = 30.0


class ManualClock:
    """Seconds that pass when the test says so."""

    def __init__(self) -> None:
        self.now_seconds = 1000.0

    def __call__(self) -> float:
        return self.now_seconds


def ended(code: int) -> ExitStatus:
    return ExitStatus(exit_code=code, signal_number=None)


def test_an_entry_older_than_the_age_limit_goes_and_a_recent_one_stays() -> None:
    clock = ManualClock()
    memo = ExitMemo(max_age_seconds=600.0, clock=clock)
    memo.remember("old", ended(1))
    clock.now_seconds += 500.0
    memo.remember("recent", ended(2))
    clock.now_seconds += 200.0  # "old" is 700 s old, "recent" 200 s
    assert memo.get("old") is None
    assert memo.get("recent") == ended(2)
    assert len(memo) == 1


def test_past_the_count_limit_the_oldest_entry_goes() -> None:
    clock = ManualClock()
    memo = ExitMemo(max_entries=3, clock=clock)
    for number in range(5):
        memo.remember(f"engine-{number}", ended(number))
        clock.now_seconds += 1.0
    assert [memo.get(f"engine-{number}") for number in range(5)] == [None, None, ended(2), ended(3), ended(4)]


def test_remembering_an_engine_again_makes_its_entry_recent() -> None:
    clock = ManualClock()
    memo = ExitMemo(max_entries=2, clock=clock)
    memo.remember("first", ended(1))
    memo.remember("second", ended(2))
    memo.remember("first", ended(1))
    memo.remember("third", ended(3))
    assert memo.get("second") is None and memo.get("first") == ended(1)


def test_a_memo_that_keeps_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="max_entries=0"):
        ExitMemo(max_entries=0)


def exiting_spec(tmp_path: Path, code: int) -> LaunchSpec:
    name = f"exit-{code}"
    return LaunchSpec(
        identity=EngineIdentity(
            owner=uuid.uuid4().hex,
            launch_token=uuid.uuid4().hex,
            deployment=name,
            instance_uid=uuid.uuid4().hex,
            replica_index=0,
            start_number=1,
        ),
        program=[sys.executable, "-c", f"raise SystemExit({code})"],
        arguments=[],
        env={},
        gpu_ids=[],
        model_path=str(tmp_path),
        address=EngineAddress(bind_host="127.0.0.1", port=0, reach_host="127.0.0.1", reach_port=0),
        log_path=tmp_path / f"{name}.log",
        working_directory=tmp_path / name,
    )


async def wait_for_exit(runtime: ProcessRuntime, handle: EngineHandle) -> ExitStatus:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + EXIT_WAIT_SECONDS
    while (status := await runtime.exit_status(handle)) is None:
        assert loop.time() < deadline, f"{handle.label} did not exit"
        await asyncio.sleep(0.02)
    return status


async def test_the_process_runtime_forgets_an_old_exit_and_keeps_a_recent_one(tmp_path: Path) -> None:
    clock = ManualClock()
    runtime = ProcessRuntime(exit_memo=ExitMemo(max_age_seconds=600.0, clock=clock))
    old = await runtime.start(exiting_spec(tmp_path, 3))
    assert await wait_for_exit(runtime, old.handle) == ended(3)
    clock.now_seconds += 500.0
    recent = await runtime.start(exiting_spec(tmp_path, 4))
    assert await wait_for_exit(runtime, recent.handle) == ended(4)
    clock.now_seconds += 200.0
    # Reaped 700 s ago: its code is gone; the engine is still known to have ended.
    assert await runtime.exit_status(old.handle) == ExitStatus(exit_code=None, signal_number=None)
    assert await runtime.exit_status(recent.handle) == ended(4)
    await runtime.close()
