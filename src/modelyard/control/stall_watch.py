"""A start that hangs without an error: the engine's log shows no progress for a long time.

Large models may load silently for minutes, so a stall is not a failure by itself: the instance
stays ``starting`` (the startup timeout still applies), and its reason and diagnosis say how long
the engine has made no progress and what the doctor reads in the log (``log.stalled``: the stage
it stopped in and its fix, and any signature found), once per stall.

New lines count as progress unless they are the ones a stuck start repeats (vLLM's debug line
waiting for its engine core, a health check answered 503: ``doctor.signatures.stall.shows_progress``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from modelyard.control.context import Clock
from modelyard.doctor.signatures.stall import shows_progress

# The most of a log's new bytes read at one look (the rest counts as progress).
_NEW_BYTES_READ = 64 * 1024


@dataclass
class StallWatch:
    log_path: Path
    clock: Clock
    stall_seconds: float
    _size: int = -1
    _changed_at: float = field(default=0.0)
    _reported: bool = False

    def _grew_with_progress(self, old_size: int, size: int) -> bool:
        if old_size < 0 or size < old_size or size - old_size > _NEW_BYTES_READ:
            return True
        try:
            with open(self.log_path, "rb") as log_file:
                log_file.seek(old_size)
                added = log_file.read(size - old_size).decode(errors="replace")
        except OSError:
            return True
        return shows_progress(added)

    def stalled_for(self) -> float | None:
        """Seconds without progress, once they pass ``stall_seconds`` (then None until the log
        moves on and stalls again)."""
        now = self.clock.monotonic()
        try:
            size = self.log_path.stat().st_size
        except OSError:
            size = 0
        if size != self._size:
            progressed = self._grew_with_progress(self._size, size)
            self._size = size
            if progressed:
                self._changed_at, self._reported = now, False
                return None
        quiet = now - self._changed_at
        if quiet < self.stall_seconds or self._reported:
            return None
        self._reported = True
        return quiet
