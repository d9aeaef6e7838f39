"""Counters that every gateway worker sees: int64 tables in one shared-memory segment.

Each table has one row per worker and a fixed number of columns. Worker ``w`` only ever writes
row ``w`` (so there is no lock and no lost update: one writer per cell), and anyone reads a
column as the sum over the rows. An aligned 8-byte store is atomic on x86-64 and arm64, so a
reader sees each cell either before or after a write, never torn.

The main process creates the segment (``SharedCounters.create``) before it starts the workers,
and zeroes the row of a worker that died before restarting it (``clear_row``): counts of
requests in flight there are gone with it. With no workers (``--gateway-workers 0``) the same
class runs on private memory (``SharedCounters.private``).

Tables are declared once, in ``SHARED_TABLES``: the requests in flight per engine endpoint
(least-outstanding routing), and the counts that the limits per API key and per deployment are
checked against (``limit_counters.py``).

Usage::

    counters = SharedCounters.create(workers=4)           # main process
    view = SharedCounters.attach(counters.name, workers=4, row=2)   # in worker 2
    endpoints = view.table("endpoint_requests")
    endpoints.add(column=7, delta=1)
    endpoints.total(7)      # summed over the workers' rows
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory

from modelyard.control.endpoints import ENDPOINT_COLUMNS
from modelyard.server.gateway.limit_slots import DEPLOYMENT_SLOTS, KEY_SLOTS, PROJECT_SLOTS, WINDOW_CELLS

_CELL_BYTES = 8


@dataclass(frozen=True)
class TableSpec:
    name: str
    columns: int


# Every shared table, in layout order. Adding one changes the segment's size; nothing persists it.
SHARED_TABLES: tuple[TableSpec, ...] = (
    # Requests in flight through each worker to each engine endpoint (column: Endpoint.counter_column).
    TableSpec("endpoint_requests", ENDPOINT_COLUMNS),
    # Limits (limit_counters.py): requests in flight per key / deployment slot, and per slot two
    # minute buckets of (minute stamp, requests, tokens).
    TableSpec("key_in_flight", KEY_SLOTS),
    TableSpec("key_windows", KEY_SLOTS * WINDOW_CELLS),
    TableSpec("deployment_in_flight", DEPLOYMENT_SLOTS),
    TableSpec("deployment_windows", DEPLOYMENT_SLOTS * WINDOW_CELLS),
    # Scale to zero (hold.py): requests held per deployment slot while it has no ready replica.
    TableSpec("deployment_held", DEPLOYMENT_SLOTS),
    # Project quotas (project_limits.py): requests in flight per project slot (and its minute
    # buckets, which SlidingCounters keeps; no per-minute limit of a project reads them yet).
    TableSpec("project_in_flight", PROJECT_SLOTS),
    TableSpec("project_windows", PROJECT_SLOTS * WINDOW_CELLS),
)


class CounterTable:
    """One table: ``rows`` x ``columns`` int64 cells; this process writes only ``row``."""

    def __init__(self, cells: memoryview, rows: int, columns: int, row: int) -> None:
        self._cells = cells
        self._rows = rows
        self._columns = columns
        self._own = row * columns
        self.columns = columns

    def add(self, column: int, delta: int) -> None:
        """Add ``delta`` to this worker's cell of ``column``."""
        index = self._own + column
        self._cells[index] += delta

    def own(self, column: int) -> int:
        return int(self._cells[self._own + column])

    def set_own(self, column: int, value: int) -> None:
        """Set this worker's cell of ``column``."""
        self._cells[self._own + column] = value

    def by_row(self, column: int) -> list[int]:
        """The column's cell in every worker's row, in row order."""
        return list(self._cells[column :: self._columns])

    def total(self, column: int) -> int:
        """The column summed over every worker's row."""
        return sum(self._cells[column :: self._columns])

    def clear_row(self, row: int) -> None:
        start = row * self._columns
        self._cells[start : start + self._columns] = memoryview(bytes(self._columns * _CELL_BYTES)).cast("q")


class SharedCounters:
    """Every table of ``SHARED_TABLES``, for ``workers`` rows, seen from one row."""

    def __init__(self, buffer: memoryview, *, workers: int, row: int, memory: SharedMemory | None) -> None:
        self._memory = memory
        self.workers = workers
        self.row = row
        cells = buffer.cast("q")
        # Every view of the segment, released before it is closed (an open view blocks closing).
        self._views = [buffer, cells]
        self._tables: dict[str, CounterTable] = {}
        offset = 0
        for spec in SHARED_TABLES:
            size = workers * spec.columns
            view = cells[offset : offset + size]
            self._views.append(view)
            self._tables[spec.name] = CounterTable(view, workers, spec.columns, row)
            offset += size

    @staticmethod
    def size_bytes(workers: int) -> int:
        return sum(workers * spec.columns for spec in SHARED_TABLES) * _CELL_BYTES

    @classmethod
    def create(cls, workers: int) -> SharedCounters:
        """A new zeroed segment (main process); its ``name`` is given to the workers."""
        memory = SharedMemory(create=True, size=cls.size_bytes(workers))
        buffer = memory.buf
        assert buffer is not None
        buffer[:] = bytes(memory.size)
        return cls(buffer, workers=workers, row=0, memory=memory)

    @classmethod
    def attach(cls, name: str, *, workers: int, row: int) -> SharedCounters:
        """The main process's segment, seen from worker ``row``."""
        memory = SharedMemory(name=name)
        # The main process owns the segment: this process must not unlink it when it exits.
        resource_tracker.unregister(memory._name, "shared_memory")  # type: ignore[attr-defined]
        buffer = memory.buf
        assert buffer is not None
        return cls(buffer, workers=workers, row=row, memory=memory)

    @classmethod
    def private(cls) -> SharedCounters:
        """One row in this process's own memory (the gateway inside the main process)."""
        return cls(memoryview(bytearray(cls.size_bytes(1))), workers=1, row=0, memory=None)

    @property
    def name(self) -> str:
        return self._memory.name if self._memory is not None else ""

    def table(self, name: str) -> CounterTable:
        return self._tables[name]

    def clear_row(self, row: int) -> None:
        """Forget what worker ``row`` had counted (it died; its requests are gone)."""
        for table in self._tables.values():
            table.clear_row(row)

    def close(self, *, unlink: bool = False) -> None:
        self._tables.clear()
        for view in reversed(self._views):
            view.release()
        self._views.clear()
        if self._memory is not None:
            self._memory.close()
            if unlink:
                self._memory.unlink()
