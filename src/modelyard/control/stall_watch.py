"""A start that hangs without an error: the engine's log has no new line for a long time.

Large models may load silently for minutes, so a stall is not a failure by itself: the instance
stays ``starting`` (the startup timeout still applies), and its reason and diagnosis say how long
the engine has printed nothing and what the doctor reads in the log (``log.stalled`` and any
signature found), once per stall.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from modelyard.control.context import Clock


@dataclass
class StallWatch:
    log_path: Path
    clock: Clock
    stall_seconds: float
    _size: int = -1
    _changed_at: float = field(default=0.0)
    _reported: bool = False

    def stalled_for(self) -> float | None:
        """Seconds without a new byte, once they pass ``stall_seconds`` (then None until the
        log grows and stalls again)."""
        now = self.clock.monotonic()
        try:
            size = self.log_path.stat().st_size
        except OSError:
            size = 0
        if size != self._size:
            self._size, self._changed_at, self._reported = size, now, False
            return None
        quiet = now - self._changed_at
        if quiet < self.stall_seconds or self._reported:
            return None
        self._reported = True
        return quiet
