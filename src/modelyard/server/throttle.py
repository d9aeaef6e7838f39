"""Failed authentications per client address, answered with exponential back-off.

A wrong admin password costs a scrypt run (tens of milliseconds of CPU) and a wrong API key a
database read, so guessing is throttled where it comes from: after ``free_failures`` failures an
address must wait ``base_delay_s`` before its next try, then twice as long after each further
failure, up to ``max_delay_s``; while it waits, its requests are answered ``429`` with
``Retry-After`` (the seconds until its next try is admitted, rounded up) and cost nothing.
Failures are forgotten ``forget_after_s`` after the last one. IPv6 addresses count per /64 (one
host can use a whole /64).

An attempt is counted *before* the expensive check runs, in the same step as the check that it
may run (``charge``): the check and the count are one step under the table's lock, so parallel
guesses cannot all pass the check before any is counted. An attempt that turns out right is
given back (``refund``); a wrong one stays counted. So of any number of guesses sent at once,
``free_failures`` are checked and the rest refused; a correct attempt never clears failures
that other attempts made, so a client holding one good key cannot wipe its count while it guesses
others.

Requests from the host itself (loopback) are never held back: the admin can always reach the
server from where it runs, even while someone outside is locked out. Behind a reverse proxy on
the same host, uvicorn takes the client address from ``X-Forwarded-For``; a proxy that does not
set it makes every client look local.

The records live in a ``ThrottleTable`` (``throttle_table.py``): private memory for the login
throttle (every admin request is answered by the main process), one shared-memory table for the
API-key throttle of every gateway worker, so an address gets ``free_failures`` in all, not per
worker.

Usage::

    admin = guarded(throttle, address, authenticate, context, username, password)
    # or, by hand:
    throttle.charge(address)        # raises TooManyRequests while the address must wait
    try:
        user = authenticate(...)    # Unauthorized: the attempt stays counted
    except Unauthorized:
        raise
    except BaseException:
        throttle.refund(address)
        raise
    throttle.refund(address)        # it was right: given back
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from modelyard.errors import TooManyRequests, Unauthorized
from modelyard.server.throttle_table import FailureRecord, ThrottleTable

Result = TypeVar("Result")

# Addresses whose key and hash this process remembers (a dict lookup instead of parsing).
_ADDRESS_CACHE_ENTRIES = 4096


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
    """Counts failures per address in ``table`` (thread-safe; shared by processes when it is)."""

    what: str = "authentication"
    free_failures: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 900.0
    forget_after_s: float = 900.0
    clock: Callable[[], float] = time.monotonic
    table: ThrottleTable = field(default_factory=ThrottleTable.private)
    # address -> its table hash, None for loopback (per process: the table's secret is fixed).
    _hashes: dict[str | None, int | None] = field(default_factory=dict)

    def _hash(self, address: str | None) -> int | None:
        try:
            return self._hashes[address]
        except KeyError:
            pass
        key = address_key(address)
        hashed = None if key is None else self.table.address_hash(key)
        if len(self._hashes) >= _ADDRESS_CACHE_ENTRIES:
            self._hashes.clear()
        self._hashes[address] = hashed
        return hashed

    def _delay_s(self, failures: int) -> float:
        """How long an address with ``failures`` waits after its last one (0: it need not)."""
        # The free failures answered, every further attempt waits: 1, 2, 4, ... x base_delay_s.
        beyond = failures - self.free_failures + 1
        if beyond <= 0:
            return 0.0
        return float(min(self.max_delay_s, self.base_delay_s * 2 ** min(beyond - 1, 30)))

    def _refusal(self, address: str | None, wait_s: float) -> TooManyRequests:
        seconds = max(1, math.ceil(wait_s))
        return TooManyRequests(
            f"too many failed {self.what} attempts from {address}; try again in {seconds} s",
            retry_after_seconds=seconds,
            hint="check the credentials; each further failure doubles the wait",
        )

    def check(self, address: str | None) -> None:
        """Raise ``TooManyRequests`` while ``address`` must wait; counts nothing (for requests
        whose credentials are known to be right, e.g. a cached good key)."""
        now = self.clock()
        if now >= self.table.latest_block():  # nobody waits: the common case, without the lock
            return
        hashed = self._hash(address)
        if hashed is None:
            return
        table = self.table
        with table.locked():
            slot = table.find(hashed)
            blocked_until = table.read(slot).blocked_until if slot is not None else 0.0
            if blocked_until <= now:
                return
            table.count(admitted=False)
        raise self._refusal(address, blocked_until - now)

    def charge(self, address: str | None) -> None:
        """Check and count one attempt in one step: ``TooManyRequests`` while ``address`` must
        wait (nothing counted), else one more failure is counted before the attempt runs."""
        hashed = self._hash(address)
        if hashed is None:
            return
        table = self.table
        with table.locked():
            now = self.clock()
            slot = table.claim(hashed, forgotten_before=now - self.forget_after_s)
            record = table.read(slot)
            if record.blocked_until > now:
                table.count(admitted=False)
                wait_s = record.blocked_until - now
            else:
                failures = 1 if now - record.last_failure > self.forget_after_s else record.failures + 1
                delay_s = self._delay_s(failures)
                table.write(slot, FailureRecord(failures, now, now + delay_s if delay_s else 0.0))
                table.count(admitted=True)
                return
        raise self._refusal(address, wait_s)

    def refund(self, address: str | None) -> None:
        """Give back one attempt of ``charge``: it was right, or could not be checked."""
        hashed = self._hash(address)
        if hashed is None:
            return
        table = self.table
        with table.locked():
            slot = table.find(hashed)
            if slot is None:
                return
            record = table.read(slot)
            failures = record.failures - 1
            if failures <= 0:
                table.free(slot)
                return
            delay_s = self._delay_s(failures)
            blocked_until = record.last_failure + delay_s if delay_s else 0.0
            table.write(slot, FailureRecord(failures, record.last_failure, blocked_until))

    def failures(self, address: str | None) -> int:
        """The failures counted for ``address`` (0 once forgotten)."""
        hashed = self._hash(address)
        if hashed is None:
            return 0
        table = self.table
        with table.locked():
            slot = table.find(hashed)
            if slot is None:
                return 0
            record = table.read(slot)
            forgotten = self.clock() - record.last_failure > self.forget_after_s
            return 0 if forgotten else record.failures

    def counts(self) -> tuple[int, int]:
        """(attempts admitted to their check, attempts refused) from other hosts, for ``/metrics``."""
        return self.table.counts()


def guarded(
    throttle: FailureThrottle, address: str | None, attempt: Callable[..., Result], *args: object
) -> Result:
    """``attempt(*args)`` for ``address``, counted before it runs: refused while the address must
    wait; its ``Unauthorized`` stays counted, anything else (a success, a server error) is given back."""
    throttle.charge(address)
    try:
        result = attempt(*args)
    except Unauthorized:
        raise
    except BaseException:
        throttle.refund(address)
        raise
    throttle.refund(address)
    return result
