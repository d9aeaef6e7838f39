"""Live progress of a running task, per file and in total: bytes, rate, time left.

``TaskProgress`` is the ``TransferObserver`` the download threads report to; the manager writes
``snapshot()`` to the task row every second (what survives a restart) and the API adds
``live()`` (rates and time left, which only the running process knows).

The rate is the bytes received over the last ``RATE_WINDOW_SECONDS`` (sampled at each snapshot);
the time left is what remains at that rate. Bytes re-read from disk at a resume are progress but
not rate.

Usage::

    progress = TaskProgress(task.files)
    download_files(..., observer=progress, ...)
    progress.snapshot()  # the files list with bytes, state, attempts, last error
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RATE_WINDOW_SECONDS = 10.0

# File states, as the task row and the API show them.
PENDING, DOWNLOADING, VERIFIED, FAILED = "pending", "downloading", "verified", "failed"


@dataclass
class _FileProgress:
    entry: dict[str, Any]
    received: int = 0  # bytes that came over the network (for the rate)
    samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=64))


def _rate(samples: deque[tuple[float, int]], now: float, current: int) -> float | None:
    recent = [sample for sample in samples if now - sample[0] <= RATE_WINDOW_SECONDS]
    if not recent:
        return None
    start_time, start_bytes = recent[0]
    elapsed = now - start_time
    if elapsed < 0.5:
        return None
    return max(0.0, (current - start_bytes) / elapsed)


class TaskProgress:
    """Thread-safe progress of one task's files; the entries are the task row's ``files`` dicts."""

    def __init__(self, files: list[dict[str, Any]], clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._files = {str(entry["path"]): _FileProgress(dict(entry)) for entry in files}
        self._received = 0
        self._samples: deque[tuple[float, int]] = deque(maxlen=64)
        self.phase = ""

    def _entry(self, path: str) -> dict[str, Any]:
        return self._files[path].entry

    # -- TransferObserver -------------------------------------------------------------------
    def file_started(self, path: str, bytes_on_disk: int) -> None:
        with self._lock:
            entry = self._entry(path)
            entry.update(state=DOWNLOADING, bytes=bytes_on_disk)

    def bytes_received(self, path: str, count: int) -> None:
        with self._lock:
            item = self._files[path]
            item.entry["bytes"] = int(item.entry.get("bytes", 0)) + count
            item.received += count
            self._received += count

    def file_restarted(self, path: str, reason: str) -> None:
        with self._lock:
            entry = self._entry(path)
            entry.update(bytes=0, restarts=int(entry.get("restarts", 0)) + 1, error=reason)

    def attempt_failed(self, path: str, reason: str, retry_in_seconds: float) -> None:
        with self._lock:
            entry = self._entry(path)
            entry.update(retries=int(entry.get("retries", 0)) + 1, error=reason)

    def file_verified(self, path: str, sha256: str) -> None:
        with self._lock:
            entry = self._entry(path)
            entry.update(state=VERIFIED, bytes=entry["size"], verified_sha256=sha256)

    # -- for the runner and the manager ------------------------------------------------------
    def file_failed(self, path: str, reason: str) -> None:
        with self._lock:
            if path in self._files:
                self._entry(path).update(state=FAILED, error=reason)

    def reset_bytes(self, path: str) -> None:
        """A new pass over the file starts (export: hashing, then writing)."""
        with self._lock:
            self._entry(path)["bytes"] = 0

    def snapshot(self) -> tuple[list[dict[str, Any]], int]:
        """The files as the task row keeps them, and the bytes done in total; samples the rates."""
        now = self._clock()
        with self._lock:
            self._samples.append((now, self._received))
            for item in self._files.values():
                item.samples.append((now, item.received))
            files = [dict(item.entry) for item in self._files.values()]
        done = sum(min(int(entry.get("bytes", 0)), int(entry["size"])) for entry in files)
        return files, done

    def live(self) -> dict[str, Any]:
        """Rates (bytes/s) and time left (s), in total and per file being downloaded."""
        now = self._clock()
        with self._lock:
            total_rate = _rate(self._samples, now, self._received)
            files: dict[str, dict[str, float | None]] = {}
            remaining_total = 0
            for path, item in self._files.items():
                remaining = max(0, int(item.entry["size"]) - int(item.entry.get("bytes", 0)))
                remaining_total += remaining
                if item.entry.get("state") != DOWNLOADING:
                    continue
                rate = _rate(item.samples, now, item.received)
                files[path] = {"rate_bytes_per_second": rate, "seconds_left": _left(remaining, rate)}
        return {
            "phase": self.phase,
            "rate_bytes_per_second": total_rate,
            "seconds_left": _left(remaining_total, total_rate),
            "files": files,
        }


def _left(remaining: int, rate: float | None) -> float | None:
    if remaining == 0:
        return 0.0
    if not rate:
        return None
    return remaining / rate
