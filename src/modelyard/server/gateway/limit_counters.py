"""The counts that limits are checked against, in the shared counters: one view for all workers.

For each key (or deployment) slot, every gateway worker keeps in its own row of the shared
counters (``shared_counters.py``) the requests it has in flight, and two minute buckets, one for
even and one for odd minutes, each ``(minute stamp, requests, tokens)``. A worker only writes its
own row; a check sums the rows. The sliding minute at ``now`` is the current minute's bucket of
every row plus the previous minute's weighted by how much of it is still inside the last 60 s;
a bucket whose stamp is neither minute is stale and counts nothing (its worker has not written
since), and a worker reuses its stale bucket by zeroing it before stamping it.

The error this leaves (``docs/architecture.md``, "Limits across gateway workers"): a check and its
count are one synchronous step in a worker, so only admissions being decided on other workers at
the same instant are unseen: at most ``workers - 1`` of them, so at most ``limit + workers - 1``
requests (or requests in flight) are admitted for a limit of ``limit``.

Usage::

    counters = SlidingCounters.for_keys(shared)    # shared: this process's SharedCounters
    window = counters.window(key_id, time.time())
    window.requests, window.tokens      # over the sliding minute
    counters.add(key_id, time.time(), requests=1, tokens=300)
"""

from __future__ import annotations

from dataclasses import dataclass

from modelyard.server.gateway.limit_slots import DEPLOYMENT_SLOTS, KEY_SLOTS, PROJECT_SLOTS, WINDOW_CELLS
from modelyard.server.gateway.shared_counters import CounterTable, SharedCounters

WINDOW_S = 60.0
_STAMP, _REQUESTS, _TOKENS = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Window:
    """One id's counts in the current minute and the one before, at ``into_s`` seconds into the
    current minute (summed over the workers)."""

    current_requests: float
    current_tokens: float
    previous_requests: float
    previous_tokens: float
    into_s: float

    @property
    def _weight(self) -> float:
        """How much of the previous minute is still inside the last 60 s."""
        return 1.0 - self.into_s / WINDOW_S

    @property
    def requests(self) -> float:
        """Requests over the sliding minute."""
        return self.current_requests + self.previous_requests * self._weight

    @property
    def tokens(self) -> float:
        """Tokens over the sliding minute."""
        return self.current_tokens + self.previous_tokens * self._weight


@dataclass
class SlidingCounters:
    """Requests in flight and the sliding minute per id (key or deployment), summed over workers."""

    in_flight_table: CounterTable
    windows_table: CounterTable
    slots: int

    @classmethod
    def for_keys(cls, shared: SharedCounters) -> SlidingCounters:
        return cls(shared.table("key_in_flight"), shared.table("key_windows"), KEY_SLOTS)

    @classmethod
    def for_deployments(cls, shared: SharedCounters) -> SlidingCounters:
        return cls(shared.table("deployment_in_flight"), shared.table("deployment_windows"), DEPLOYMENT_SLOTS)

    @classmethod
    def for_projects(cls, shared: SharedCounters) -> SlidingCounters:
        return cls(shared.table("project_in_flight"), shared.table("project_windows"), PROJECT_SLOTS)

    def _bucket(self, identifier: int, minute: int) -> int:
        """The first column of ``identifier``'s bucket for ``minute``."""
        return (identifier % self.slots) * WINDOW_CELLS + (minute % 2) * 3

    def window(self, identifier: int, now: float) -> Window:
        """The counts of the current minute and the previous one at ``now``, summed over workers."""
        minute = int(now // WINDOW_S)
        table = self.windows_table
        sums: list[float] = []
        for wanted in (minute, minute - 1):
            column = self._bucket(identifier, wanted)
            stamps = table.by_row(column + _STAMP)
            counted = table.by_row(column + _REQUESTS)
            used = table.by_row(column + _TOKENS)
            fresh = [row for row, stamp in enumerate(stamps) if stamp == wanted + 1]  # 0: never written
            sums += [float(sum(counted[row] for row in fresh)), float(sum(used[row] for row in fresh))]
        return Window(sums[0], sums[1], sums[2], sums[3], into_s=now - minute * WINDOW_S)

    def add(self, identifier: int, now: float, *, requests: int, tokens: int) -> None:
        """Count ``requests`` and ``tokens`` in this worker's bucket of the current minute."""
        minute = int(now // WINDOW_S)
        column = self._bucket(identifier, minute)
        table = self.windows_table
        if table.own(column + _STAMP) != minute + 1:
            # Zeroed before it is stamped: a reader never sees the old counts under the new stamp.
            table.set_own(column + _REQUESTS, 0)
            table.set_own(column + _TOKENS, 0)
            table.set_own(column + _STAMP, minute + 1)
        if requests:
            table.add(column + _REQUESTS, requests)
        if tokens:
            table.add(column + _TOKENS, tokens)

    def in_flight(self, identifier: int) -> int:
        return self.in_flight_table.total(identifier % self.slots)

    def change_in_flight(self, identifier: int, delta: int) -> None:
        self.in_flight_table.add(identifier % self.slots, delta)


def current_use(counters: SlidingCounters, identifier: int, now: float) -> dict[str, int]:
    """What the console and ``GET /api/v1/keys`` show: the sliding minute's requests and tokens,
    and the requests running, summed over the gateway workers."""
    window = counters.window(identifier, now)
    return {
        "requests_last_minute": round(window.requests),
        "tokens_last_minute": round(window.tokens),
        "running": counters.in_flight(identifier),
    }
