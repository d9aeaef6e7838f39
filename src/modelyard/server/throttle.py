"""Failed authentications per client address, answered with exponential back-off.

A wrong admin password costs a scrypt run (tens of milliseconds of CPU) and a wrong API key a
database read, so guessing is throttled where it comes from: after ``free_failures`` failures an
address must wait ``base_delay_s`` before its next try, then twice as long after each further
failure, up to
``max_delay_s``; while it waits, its requests are answered ``429`` with ``Retry-After`` and cost
nothing. A success clears the address; failures are forgotten ``forget_after_s`` after the
last one. IPv6 addresses count per /64 (one host can use a whole /64).

Requests from the host itself (loopback) are never held back: the admin can always reach the
server from where it runs, even while someone outside is locked out. Behind a reverse proxy on
the same host, uvicorn takes the client address from ``X-Forwarded-For``; a proxy that does not
set it makes every client look local.

One ``FailureThrottle`` per process: with several gateway workers, each holds its own (an
address gets ``free_failures`` per worker before it waits).

Usage::

    throttle.check(address)            # raises TooManyRequests while the address must wait
    try:
        user = authenticate(...)
    except Unauthorized:
        throttle.failed(address)
        raise
    throttle.succeeded(address)
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from modelyard.errors import TooManyRequests, Unauthorized

Result = TypeVar("Result")


@dataclass
class _Record:
    failures: int = 0
    blocked_until: float = 0.0
    last_failure: float = 0.0


def address_key(address: str | None) -> str | None:
    """What failures are counted by: the address, an IPv6 one by its /64; None for loopback."""
    if not address:
        return "unknown"
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if parsed.is_loopback or (
        isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped and parsed.ipv4_mapped.is_loopback
    ):
        return None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is None:
        return str(ipaddress.IPv6Network(f"{parsed}/64", strict=False))
    return str(parsed.ipv4_mapped if isinstance(parsed, ipaddress.IPv6Address) else parsed)


@dataclass
class FailureThrottle:
    """Counts failures per address (thread-safe: admin checks run in worker threads)."""

    what: str = "authentication"
    free_failures: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 900.0
    forget_after_s: float = 900.0
    max_addresses: int = 100_000
    clock: Callable[[], float] = time.monotonic
    _records: OrderedDict[str, _Record] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, address: str | None) -> None:
        """Raise ``TooManyRequests`` while ``address`` must wait before trying again."""
        key = address_key(address)
        if key is None:
            return
        with self._lock:
            record = self._records.get(key)
            now = self.clock()
            if record is None or record.blocked_until <= now:
                return
            wait_s = record.blocked_until - now
        raise TooManyRequests(
            f"too many failed {self.what} attempts from {address}; try again in {math.ceil(wait_s)} s",
            retry_after_seconds=math.ceil(wait_s),
            hint="check the credentials; each further failure doubles the wait",
        )

    def failed(self, address: str | None) -> None:
        key = address_key(address)
        if key is None:
            return
        with self._lock:
            now = self.clock()
            record = self._records.pop(key, None)
            if record is None or now - record.last_failure > self.forget_after_s:
                record = _Record()
            record.failures += 1
            record.last_failure = now
            # The free failures answered, every further attempt waits: 1, 2, 4, ... x base_delay_s.
            beyond = record.failures - self.free_failures + 1
            if beyond > 0:
                record.blocked_until = now + min(
                    self.max_delay_s, self.base_delay_s * 2 ** min(beyond - 1, 30)
                )
            self._records[key] = record  # most recent last
            while len(self._records) > self.max_addresses:
                self._records.popitem(last=False)

    def succeeded(self, address: str | None) -> None:
        if not self._records:  # the common case, on every request: nothing to clear
            return
        key = address_key(address)
        if key is None:
            return
        with self._lock:
            self._records.pop(key, None)

    def failures(self, address: str | None) -> int:
        key = address_key(address)
        with self._lock:
            record = self._records.get(key) if key is not None else None
            return record.failures if record is not None else 0


def guarded(
    throttle: FailureThrottle, address: str | None, attempt: Callable[..., Result], *args: object
) -> Result:
    """``attempt(*args)`` for ``address``: refused while it must wait, its ``Unauthorized`` counted."""
    throttle.check(address)
    try:
        result = attempt(*args)
    except Unauthorized:
        throttle.failed(address)
        raise
    throttle.succeeded(address)
    return result
