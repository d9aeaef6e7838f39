"""The controller's watch on a starting engine's log (real files, a manual clock): silence is a
stall once it lasts, new progress ends it, and lines a stuck start repeats are no progress."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from modelyard.control.context import ControllerOptions
from modelyard.control.stall_watch import StallWatch
from modelyard.errors import InvalidInput

NCCL_LINE = "(Worker_TP0 pid=301) INFO 03-10 11:17:53 [pynccl.py:69] vLLM is using nccl==2.27.3\n"
POLL_LINE = (
    "(APIServer pid=1) DEBUG 09-02 17:29:16 [utils.py:777] Waiting for 1 local, 0 remote core engine "
    "proc(s) to start.\n"
)


class ManualClock:
    def __init__(self) -> None:
        self.seconds = 0.0

    def monotonic(self) -> float:
        return self.seconds

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.seconds, UTC)


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as log_file:
        log_file.write(text)


def test_a_silent_log_is_reported_once_after_the_limit(tmp_path: Path) -> None:
    log = tmp_path / "start-1.log"
    log.write_text(NCCL_LINE)
    clock = ManualClock()
    watch = StallWatch(log, clock, stall_seconds=60)
    assert watch.stalled_for() is None
    clock.seconds = 59
    assert watch.stalled_for() is None
    clock.seconds = 61
    assert watch.stalled_for() == 61
    clock.seconds = 120
    assert watch.stalled_for() is None  # once per stall


def test_progress_ends_the_stall_and_lines_a_stuck_start_repeats_do_not(tmp_path: Path) -> None:
    log = tmp_path / "start-1.log"
    log.write_text(NCCL_LINE)
    clock = ManualClock()
    watch = StallWatch(log, clock, stall_seconds=60)
    watch.stalled_for()
    for second in (20, 40, 61):
        clock.seconds = second
        _append(log, POLL_LINE)
        reported = watch.stalled_for()
    assert reported == 61
    clock.seconds = 70
    _append(log, "Loading safetensors checkpoint shards:   0% Completed | 0/2\n")
    assert watch.stalled_for() is None
    clock.seconds = 129
    assert watch.stalled_for() is None
    clock.seconds = 131
    assert watch.stalled_for() == 61


def test_the_stall_limit_is_read_from_the_environment() -> None:
    assert ControllerOptions.from_environment({}).stall_seconds == ControllerOptions().stall_seconds
    assert ControllerOptions.from_environment({"MODELYARD_ENGINE_STALL_SECONDS": "90"}).stall_seconds == 90
    with pytest.raises(InvalidInput, match="MODELYARD_ENGINE_STALL_SECONDS='soon' is not a positive"):
        ControllerOptions.from_environment({"MODELYARD_ENGINE_STALL_SECONDS": "soon"})


@pytest.mark.parametrize(
    "line",
    [
        "(APIServer pid=1) DEBUG 05-16 13:12:16 [core_client.py:425] Waiting for 1 core engine proc(s) to "
        "start: {0}\n",
        "(Worker_TP0 pid=301) WARNING 12-07 10:00:01 [shm_broadcast.py:466] No available shared memory "
        "broadcast block found in 60 second.\n",
        "2025-03-07 23:50:27,532 - __main__ - WARNING - Attempt 13: Please wait for sglang server to become "
        "ready...\n",
        "[2025-12-02 16:53:46] ⏳ Still loading… (26m 2s) - this is normal for large models\n",
    ],
)
def test_what_older_and_stuck_engines_and_launchers_repeat_is_no_progress(tmp_path: Path, line: str) -> None:
    log = tmp_path / "start-1.log"
    log.write_text(NCCL_LINE)
    clock = ManualClock()
    watch = StallWatch(log, clock, stall_seconds=60)
    watch.stalled_for()
    for second in (20, 40, 61):
        clock.seconds = second
        _append(log, line)
        reported = watch.stalled_for()
    assert reported == 61
