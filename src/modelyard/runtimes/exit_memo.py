"""How finished engines ended, remembered for a while: a bounded memo every runtime keeps.

A runtime learns an engine's exit once (``poll()`` reaps a child; a container is removed after
``docker stop``; a Ray rank's supervisor is killed with its gang), but the controller may ask
``exit_status`` again (the tick after, the stop that follows an exit), and each answer must be
the same. So each runtime remembers the ``ExitStatus`` of the engines that ended, by handle id,
and forgets it again: an entry goes when it is older than ``max_age_seconds`` or when more than
``max_entries`` are held (the oldest first). A server that runs for months with engines that come
and go keeps a few hundred entries, not one per engine it ever ran. An engine asked about after
its entry went reads as its runtime then finds it: gone, its exit code unknown.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from modelyard.runtimes.base import ExitStatus

# The controller asks about an ended engine within a tick or two, and stops it within its grace
# period: ten minutes is ample, and bounds the memo of a server whose engines crash-loop.
DEFAULT_MAX_AGE_SECONDS = 600.0
DEFAULT_MAX_ENTRIES = 1024


class ExitMemo:
    """``ExitStatus`` by handle id, each kept up to ``max_age_seconds`` (on ``clock``, seconds)
    and at most ``max_entries`` of them::

        memo = ExitMemo()
        memo.remember("4242:1733550000.000", ExitStatus(exit_code=1, signal_number=None))
        memo.get("4242:1733550000.000")  # the status, until it is too old
    """

    def __init__(
        self,
        *,
        max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_age_seconds <= 0 or max_entries < 1:
            raise ValueError(
                f"an exit memo keeps entries for a positive time and at least one of them "
                f"(got max_age_seconds={max_age_seconds}, max_entries={max_entries})"
            )
        self._max_age_seconds = max_age_seconds
        self._max_entries = max_entries
        self._clock = clock
        # Oldest first: (when remembered, status).
        self._entries: OrderedDict[str, tuple[float, ExitStatus]] = OrderedDict()

    def remember(self, handle_id: str, status: ExitStatus) -> None:
        self._entries.pop(handle_id, None)
        self._entries[handle_id] = (self._clock(), status)
        self._expire()

    def get(self, handle_id: str) -> ExitStatus | None:
        """The remembered status of ``handle_id``; None when none is (or it went)."""
        self._expire()
        entry = self._entries.get(handle_id)
        return entry[1] if entry is not None else None

    def forget(self, handle_id: str) -> None:
        """A new engine has this id (a re-used pid): what the old one did is no answer for it."""
        self._entries.pop(handle_id, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        self._expire()
        return len(self._entries)

    def _expire(self) -> None:
        oldest_kept = self._clock() - self._max_age_seconds
        while self._entries:
            handle_id, (remembered_at, _) = next(iter(self._entries.items()))
            if remembered_at >= oldest_kept and len(self._entries) <= self._max_entries:
                return
            del self._entries[handle_id]
