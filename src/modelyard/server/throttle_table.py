"""The failure records of a ``FailureThrottle``, in memory that several processes can share.

A fixed table of ``buckets x SLOTS_PER_BUCKET`` slots; a slot is one address's record, four
8-byte cells: ``(address hash, failures, last failure, blocked until)`` (the times are doubles of
the throttle's clock; ``time.monotonic`` is the same clock in every process of a host). An
address hashes (BLAKE2b keyed with a secret made with the table, so nobody can aim addresses at a
bucket) to one bucket and lives in one of its slots; a new address takes a free or forgotten slot
of its bucket, or else the one whose last failure is oldest. The header holds the secret, the
attempts admitted and refused (for ``/metrics``), and the latest "blocked until" ever written,
which lets a check skip everything while no address is waiting.

Every read-modify-write happens under ``locked()``: a ``threading.Lock`` for the threads of this
process, and, for a shared table, ``flock`` on a lock file that each process opens itself (an
``flock`` is held per open file, so two processes exclude each other, and the kernel releases it
when a process dies). That is what makes a throttle's check-and-count one step across the
gateway workers.

Tables:

- ``ThrottleTable.private()``: this process's memory (the login throttle; the gateway with
  ``--gateway-workers 0``);
- ``ThrottleTable.create(lock_path)`` in the main process, ``ThrottleTable.attach(name,
  lock_path)`` in each gateway worker: one shared-memory segment for all of them.

Usage::

    table = ThrottleTable.create(Path(private_directory, "key-throttle.lock"))   # main process
    view = ThrottleTable.attach(table.name, table.lock_path)                     # a worker
    with view.locked():
        slot = view.find(view.address_hash("203.0.113.7"))
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path

SLOTS_PER_BUCKET = 8
DEFAULT_BUCKETS = 8192  # 65,536 addresses, 2 MiB
_CELL_BYTES = 8
_HEADER_CELLS = 8
_SECRET_BYTES = 16
# Header cells: 0-1 the hashing secret, 2 attempts admitted, 3 attempts refused, 4 the latest
# blocked-until (a double). Slot cells: hash, failures (int64), last failure, blocked until (doubles).
_ADMITTED, _REFUSED, _LATEST_BLOCK = 2, 3, 4
_SLOT_CELLS = 4
_HASH, _FAILURES, _LAST_FAILURE, _BLOCKED_UNTIL = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class FailureRecord:
    failures: int
    last_failure: float
    blocked_until: float


class _ProcessLock:
    """Mutual exclusion for the threads of this process and, with a file, for other processes."""

    def __init__(self, path: Path | None) -> None:
        self._thread_lock = threading.Lock()
        self._descriptor = (
            os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600) if path is not None else None
        )

    def acquire(self) -> None:
        self._thread_lock.acquire()
        if self._descriptor is not None:
            try:
                fcntl.flock(self._descriptor, fcntl.LOCK_EX)
            except BaseException:
                self._thread_lock.release()
                raise

    def release(self) -> None:
        if self._descriptor is not None:
            fcntl.flock(self._descriptor, fcntl.LOCK_UN)
        self._thread_lock.release()

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


class ThrottleTable:
    """Failure records by address hash; every method but ``latest_block`` and ``counts`` is called
    under ``locked()``."""

    def __init__(self, buffer: memoryview, *, memory: SharedMemory | None, lock_path: Path | None) -> None:
        self._memory = memory
        self.lock_path = lock_path
        self._lock = _ProcessLock(lock_path)
        self._integers = buffer.cast("q")
        self._doubles = buffer.cast("d")
        self._views: list[memoryview[int] | memoryview[float]] = [buffer, self._integers, self._doubles]
        self._buckets = (len(self._integers) - _HEADER_CELLS) // (_SLOT_CELLS * SLOTS_PER_BUCKET)
        self._secret = bytes(buffer[:_SECRET_BYTES])

    # -- making and attaching ----------------------------------------------------------------------

    @staticmethod
    def size_bytes(buckets: int) -> int:
        return (_HEADER_CELLS + buckets * SLOTS_PER_BUCKET * _SLOT_CELLS) * _CELL_BYTES

    @staticmethod
    def _initialise(buffer: memoryview) -> None:
        buffer[:] = bytes(len(buffer))
        buffer[:_SECRET_BYTES] = secrets.token_bytes(_SECRET_BYTES)

    @classmethod
    def private(cls, buckets: int = DEFAULT_BUCKETS) -> ThrottleTable:
        """A table in this process's memory, for its threads only."""
        buffer = memoryview(bytearray(cls.size_bytes(buckets)))
        cls._initialise(buffer)
        return cls(buffer, memory=None, lock_path=None)

    @classmethod
    def create(cls, lock_path: Path, buckets: int = DEFAULT_BUCKETS) -> ThrottleTable:
        """A new shared table (main process); its ``name`` and ``lock_path`` go to the workers."""
        memory = SharedMemory(create=True, size=cls.size_bytes(buckets))
        buffer = memory.buf
        assert buffer is not None
        cls._initialise(buffer[: cls.size_bytes(buckets)])
        return cls(buffer[: cls.size_bytes(buckets)], memory=memory, lock_path=lock_path)

    @classmethod
    def attach(cls, name: str, lock_path: Path, buckets: int = DEFAULT_BUCKETS) -> ThrottleTable:
        """The main process's table, seen from a gateway worker."""
        memory = SharedMemory(name=name)
        # The main process owns the segment: this process must not unlink it when it exits.
        resource_tracker.unregister(memory._name, "shared_memory")  # type: ignore[attr-defined]
        buffer = memory.buf
        assert buffer is not None
        return cls(buffer[: cls.size_bytes(buckets)], memory=memory, lock_path=lock_path)

    @property
    def name(self) -> str:
        return self._memory.name if self._memory is not None else ""

    def close(self, *, unlink: bool = False) -> None:
        for view in reversed(self._views):
            view.release()
        self._views.clear()
        self._lock.close()
        if self._memory is not None:
            self._memory.close()
            if unlink:
                self._memory.unlink()

    # -- reading without the lock ------------------------------------------------------------------

    def latest_block(self) -> float:
        """The latest "blocked until" written: while the clock is past it, nobody waits."""
        return float(self._doubles[_LATEST_BLOCK])

    def counts(self) -> tuple[int, int]:
        """(attempts admitted, attempts refused) since the table was made."""
        return int(self._integers[_ADMITTED]), int(self._integers[_REFUSED])

    # -- under the lock ----------------------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        self._lock.acquire()
        try:
            yield
        finally:
            self._lock.release()

    def address_hash(self, address_key: str) -> int:
        """A non-zero 64-bit hash of an address (0 marks a free slot)."""
        digest = hashlib.blake2b(address_key.encode(), digest_size=8, key=self._secret).digest()
        return int.from_bytes(digest, "little", signed=True) or 1

    def _first_cell(self, slot: int) -> int:
        return _HEADER_CELLS + slot * _SLOT_CELLS

    def find(self, address_hash: int) -> int | None:
        """The slot holding ``address_hash``, or None."""
        first = (address_hash % self._buckets) * SLOTS_PER_BUCKET
        integers = self._integers
        for slot in range(first, first + SLOTS_PER_BUCKET):
            if integers[_HEADER_CELLS + slot * _SLOT_CELLS + _HASH] == address_hash:
                return slot
        return None

    def claim(self, address_hash: int, forgotten_before: float) -> int:
        """A slot for ``address_hash``: its own, a free one, one whose last failure is before
        ``forgotten_before``, or else the bucket's oldest (its address's failures are forgotten)."""
        found = self.find(address_hash)
        if found is not None:
            return found
        first = (address_hash % self._buckets) * SLOTS_PER_BUCKET
        oldest, oldest_time = first, float("inf")
        for slot in range(first, first + SLOTS_PER_BUCKET):
            cell = self._first_cell(slot)
            if self._integers[cell + _HASH] == 0:
                oldest = slot
                break
            last = float(self._doubles[cell + _LAST_FAILURE])
            if last < forgotten_before:
                oldest = slot
                break
            if last < oldest_time:
                oldest, oldest_time = slot, last
        self.write(oldest, FailureRecord(0, 0.0, 0.0))
        self._integers[self._first_cell(oldest) + _HASH] = address_hash
        return oldest

    def read(self, slot: int) -> FailureRecord:
        cell = self._first_cell(slot)
        return FailureRecord(
            int(self._integers[cell + _FAILURES]),
            float(self._doubles[cell + _LAST_FAILURE]),
            float(self._doubles[cell + _BLOCKED_UNTIL]),
        )

    def write(self, slot: int, record: FailureRecord) -> None:
        cell = self._first_cell(slot)
        self._integers[cell + _FAILURES] = record.failures
        self._doubles[cell + _LAST_FAILURE] = record.last_failure
        self._doubles[cell + _BLOCKED_UNTIL] = record.blocked_until
        if record.blocked_until > self._doubles[_LATEST_BLOCK]:
            self._doubles[_LATEST_BLOCK] = record.blocked_until

    def free(self, slot: int) -> None:
        cell = self._first_cell(slot)
        self._integers[cell + _HASH] = 0
        self._integers[cell + _FAILURES] = 0

    def count(self, *, admitted: bool) -> None:
        self._integers[_ADMITTED if admitted else _REFUSED] += 1
