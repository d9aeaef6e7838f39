"""How long an engine log has made no progress, read from the file itself (``modelyard doctor --log``).

Two readings, the longer wins:

- since the last write: the file's modification time against now (a start that is hanging now);
- within the log: from the last line that showed progress (a stage line, ``signatures/stall.py``)
  to the last line with a timestamp, when the lines go on without progress (a launcher that polls
  the health path, NCCL warnings). Timestamps in vLLM's (``INFO 08-31 09:50:46``, no year),
  SGLang's (``[2025-11-21 19:07:03 TP0]``) and ISO form (``2025-12-11 17:47:01.799+08:00``, the
  form of GPUStack, Docker and most launchers) are read; lines are compared within one form.

A log that ended (a traceback, the engine shutting down) or that says the engine serves is not a
stall by these readings; the caller that still waits for it says so with ``--stalled-for``.

Usage::

    quiet = log_quiet(Path("engine.log"), now=time.time())
    quiet.seconds, quiet.since_write_seconds, quiet.within_log_seconds
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from modelyard.doctor.signatures.stall import STAGES, stage_reached

_TIMESTAMP_FORMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sglang", re.compile(r"\[(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})")),
    ("iso", re.compile(r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})")),
    ("vllm", re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})")),
)
# vLLM's timestamps have no year: any leap year reads them (02-29 included).
_YEAR_OF_YEARLESS = 2024
# The last lines of a log whose engine is gone: a traceback, a kill, a shutdown.
_ENDED = re.compile(
    r"Traceback \(most recent call last\)|^Killed$|Shutting down|EngineCore failed to start"
    r"|Initialization failed|exited with code|Engine core initialization failed",
    re.MULTILINE,
)
_ENDED_TAIL_LINES = 60


@dataclass(frozen=True)
class LogQuiet:
    seconds: float
    since_write_seconds: float
    within_log_seconds: float | None


def line_time(line: str) -> tuple[str, datetime] | None:
    """The timestamp a line starts with (or carries), and its form."""
    for form, pattern in _TIMESTAMP_FORMS:
        match = pattern.search(line)
        if match is None:
            continue
        numbers = [int(group) for group in match.groups()]
        if form == "vllm":
            numbers.insert(0, _YEAR_OF_YEARLESS)
        year, month, day, hour, minute, second = numbers
        try:
            return form, datetime(year, month, day, hour, minute, second)
        except ValueError:
            return None
    return None


def _is_progress(line: str) -> bool:
    return any(
        stage.begins.search(line) or (stage.ends is not None and stage.ends.search(line)) for stage in STAGES
    )


def quiet_within_log(text: str) -> float | None:
    """Seconds from the last progress line to the last timestamped line, in the same form."""
    last: tuple[str, datetime] | None = None
    progress: dict[str, datetime] = {}
    for line in text.splitlines():
        stamped = line_time(line)
        if stamped is None:
            continue
        last = stamped
        if _is_progress(line):
            progress[stamped[0]] = stamped[1]
    if last is None or last[0] not in progress:
        return None
    return max(0.0, (last[1] - progress[last[0]]).total_seconds())


def log_ended(text: str) -> bool:
    """The log's last lines show the engine gone (a traceback, a kill, a shutdown)."""
    tail = "\n".join(text.splitlines()[-_ENDED_TAIL_LINES:])
    return _ENDED.search(tail) is not None


def log_says_serving(text: str) -> bool:
    reached = stage_reached(text)
    return reached.stage is not None and reached.stage.key == "serving"


def log_quiet(path: Path, text: str, *, now: float) -> LogQuiet:
    """How long the log at ``path`` (whose contents are ``text``) has made no progress at ``now``."""
    since_write = max(0.0, now - path.stat().st_mtime)
    within = quiet_within_log(text)
    return LogQuiet(
        seconds=max(since_write, within or 0.0),
        since_write_seconds=since_write,
        within_log_seconds=within,
    )
