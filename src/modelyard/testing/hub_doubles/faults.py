"""Faults a hub double injects into file downloads, so tests see what a flaky hub does.

Every fault names a file (its path in the repository) and applies to that many GET requests of
its bytes (``times``; None: every request):

- ``drop_after(path, at_byte)``: send the file up to absolute byte ``at_byte``, then close the
  connection (the body is shorter than its Content-Length, as when a link drops);
- ``hold_after(path, at_byte)``: send up to ``at_byte``, then send nothing until released (a stall;
  ``Hold.reached`` is set once the bytes are out), then close;
- ``corrupt(path)``: serve the file with one byte flipped (the middle one);
- ``fail_with(path, status)``: answer ``status`` (503, 429...) instead of the file;
- ``throttle(path, bytes_per_second)``: send it no faster than that (for demos of the progress
  display; tests wait on events, never on a slow hub).

One fault changes what the hub says of a file rather than how it sends it, for every request:

- ``hide_hash(path)``: the hub gives no hash for the file. On the Hugging Face double, a mirror's
  listing with only the size (no ``lfs``, no ``blobId``) and no ``ETag`` / ``X-Linked-Etag`` on
  ``resolve/`` or the CDN; on the ModelScope double, a listing entry without ``Sha256`` (and a
  download without ``ETag``).

Usage::

    hold = hub.faults.hold_after("model-00002-of-00002.safetensors", 100_000)
    hold.reached.wait(10)
    hold.release()
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal

FaultKind = Literal["drop", "hold", "corrupt", "status", "throttle"]


@dataclass
class Hold:
    """A transfer paused at ``at_byte``: ``reached`` once the bytes before it are sent."""

    at_byte: int
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


@dataclass
class Fault:
    kind: FaultKind
    path: str
    times: int | None
    at_byte: int = 0
    status: int = 503
    hold: Hold | None = None
    bytes_per_second: float = 0.0


@dataclass
class Faults:
    _faults: list[Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _hashless: set[str] = field(default_factory=set)

    def hide_hash(self, path: str) -> None:
        """From now on the hub gives no hash for ``path``: its listing and headers carry none."""
        with self._lock:
            self._hashless.add(path)

    def reveal_hash(self, path: str) -> None:
        """Undo ``hide_hash`` (for a double shared by several tests)."""
        with self._lock:
            self._hashless.discard(path)

    def hides_hash(self, path: str) -> bool:
        with self._lock:
            return path in self._hashless

    def _add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def drop_after(self, path: str, at_byte: int, times: int | None = 1) -> None:
        self._add(Fault("drop", path, times, at_byte=at_byte))

    def hold_after(self, path: str, at_byte: int, times: int | None = 1) -> Hold:
        hold = Hold(at_byte)
        self._add(Fault("hold", path, times, at_byte=at_byte, hold=hold))
        return hold

    def corrupt(self, path: str, times: int | None = 1) -> None:
        self._add(Fault("corrupt", path, times))

    def fail_with(self, path: str, status: int, times: int | None = 1) -> None:
        self._add(Fault("status", path, times, status=status))

    def throttle(self, path: str, bytes_per_second: float, times: int | None = None) -> None:
        self._add(Fault("throttle", path, times, bytes_per_second=bytes_per_second))

    def take(self, path: str, start_byte: int) -> list[Fault]:
        """The faults that apply to a request of ``path`` from ``start_byte`` (each used once)."""
        taken: list[Fault] = []
        with self._lock:
            for fault in self._faults:
                if fault.path != path or fault.times == 0:
                    continue
                if fault.kind in ("drop", "hold") and start_byte >= fault.at_byte:
                    continue
                if fault.times is not None:
                    fault.times -= 1
                taken.append(fault)
        return taken

    def release_all(self) -> None:
        with self._lock:
            for fault in self._faults:
                if fault.hold is not None:
                    fault.hold.release()
