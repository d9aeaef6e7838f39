"""The usage journal: every answered request is on disk before its answer is complete.

``usage_records`` is written in batches, off the request path; a server killed between batches
lost the rows of the last one (81 of 1,002 answered requests over one SIGKILL). So each row is
first appended to a journal file, one JSON line per request with its ``request_id``, by one
``write()`` before the last bytes of the answer are sent: a process killed after that keeps the
row in the kernel's page cache, so it reaches the disk. The batches are ``fsync``'d before they
are written to the database (a power cut loses at most one batch delay of rows).

Files: ``<data-dir>/usage-journal/<pid>-<n>.jsonl``, a new segment every ``segment_rows``
rows. A segment is deleted once every row in it is in the database. At start, before the
gateway takes requests, ``replay_journal`` writes every row left by earlier processes; rows
already written (the crash came between the database commit and the deletion) are skipped by
their ``request_id``, so each request is counted exactly once.

A journal that cannot be written (disk full, read-only) is reported: ``failure`` says why, the
server log says it once per episode, and ``GET /api/v1/system`` shows it; the row is still queued
for the database.

Usage::

    journal = UsageJournal.open(data_dir / "usage-journal")
    sequence = journal.append(row)         # before the answer's last bytes
    journal.sync()                         # per batch, in the writer thread
    journal.committed_through(sequence)    # after the batch is in the database
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from modelyard.store.storage_errors import is_storage_full

logger = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".jsonl"


def row_to_line(values: dict[str, Any]) -> bytes:
    """One journal line: the row's column values, ``at`` as ISO 8601 (orjson: 0.3 µs a row, where
    json with a conversion pass took 4.7; it is on every request's path)."""
    return orjson.dumps(values) + b"\n"


def line_to_row(line: bytes) -> dict[str, Any] | None:
    """The column values of a journal line; None for a line cut short by a crash."""
    try:
        values = json.loads(line)
    except ValueError:
        return None
    if not isinstance(values, dict) or "request_id" not in values:
        return None
    if isinstance(values.get("at"), str):
        values["at"] = datetime.fromisoformat(values["at"])
    # A line journaled before revision 0015 has no time to first token; every row of one INSERT
    # must name the same columns.
    values.setdefault("ttft_ms", None)
    return values


@dataclass
class _Segment:
    path: Path
    descriptor: int
    last_sequence: int = 0


@dataclass
class UsageJournal:
    directory: Path
    segment_rows: int = 10_000
    failure: str | None = None
    _sequence: int = 0
    _segment_number: int = 0
    _current: _Segment | None = None
    _rows_in_current: int = 0
    _closed: list[_Segment] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, directory: Path, *, segment_rows: int = 10_000) -> UsageJournal:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        return cls(directory, segment_rows)

    def append(self, values: dict[str, Any]) -> int:
        """Write one row (a ``write()``, no ``fsync``); return its sequence number (0: not written)."""
        line = row_to_line(values)
        with self._lock:
            try:
                segment = self._segment()
                os.write(segment.descriptor, line)
            except OSError as error:
                self._report(error)
                return 0
            self._sequence += 1
            segment.last_sequence = self._sequence
            self._rows_in_current += 1
            if self.failure is not None:
                logger.warning("the usage journal in %s is written again", self.directory)
                self.failure = None
            return self._sequence

    def sync(self) -> None:
        """``fsync`` the current segment (called per batch, off the event loop)."""
        with self._lock:
            descriptor = self._current.descriptor if self._current else None
        if descriptor is not None:
            try:
                os.fsync(descriptor)
            except OSError as error:
                self._report(error)

    def committed_through(self, sequence: int) -> None:
        """Rows up to ``sequence`` are in the database: delete the segments that hold only such rows."""
        with self._lock:
            done = [segment for segment in self._closed if segment.last_sequence <= sequence]
            self._closed = [segment for segment in self._closed if segment.last_sequence > sequence]
        for segment in done:
            segment.path.unlink(missing_ok=True)

    @property
    def last_sequence(self) -> int:
        return self._sequence

    def close(self) -> None:
        """Close the current segment (deleted by ``committed_through`` once its rows are in)."""
        with self._lock:
            if self._current is not None:
                os.close(self._current.descriptor)
                self._closed.append(self._current)
                self._current = None

    def _segment(self) -> _Segment:
        if self._current is not None and self._rows_in_current >= self.segment_rows:
            os.close(self._current.descriptor)
            self._closed.append(self._current)
            self._current = None
        if self._current is None:
            self._segment_number += 1
            path = self.directory / f"{os.getpid()}-{self._segment_number}{SEGMENT_SUFFIX}"
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._current = _Segment(path, descriptor)
            self._rows_in_current = 0
        return self._current

    def _report(self, error: OSError) -> None:
        reason = "the disk is full" if is_storage_full(error) else f"{type(error).__name__}: {error}"
        if self.failure is None:
            logger.error(
                "usage rows cannot be written to the usage journal in %s (%s); they are kept in "
                "memory for the database, but a crash now would lose them",
                self.directory,
                reason,
            )
        self.failure = f"usage journal in {self.directory}: {reason}"


def journal_segments(
    directory: Path, *, exclude_pid: int | None = None, only_pid: int | None = None
) -> list[Path]:
    """The segment files in ``directory`` (those of ``exclude_pid`` left out; ``only_pid``: only
    that process's, e.g. a gateway worker that died), oldest first."""
    if not directory.is_dir():
        return []
    dated: list[tuple[float, Path]] = []
    for path in directory.glob(f"*{SEGMENT_SUFFIX}"):
        if exclude_pid is not None and path.name.startswith(f"{exclude_pid}-"):
            continue
        if only_pid is not None and not path.name.startswith(f"{only_pid}-"):
            continue
        try:
            dated.append((path.stat().st_mtime, path))
        except FileNotFoundError:
            continue  # deleted since the listing: its owner found its rows committed
    return [path for _, path in sorted(dated)]


def read_segment(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as handle:
        for line in handle:
            values = line_to_row(line)
            if values is not None:
                yield values
