"""Limits per API key: requests and tokens per minute, requests at once, a token quota per period.

Each request is admitted before it is forwarded, or refused with OpenAI's ``429``
(``code: rate_limit_exceeded``, ``type: requests`` or ``tokens``) and ``Retry-After``:

- **requests per minute** and **tokens per minute** (prompt + completion) over a sliding minute
  (the current minute's count plus the previous minute's, weighted by how much of it is still
  inside the last 60 s);
- **tokens** are counted from the engine's ``usage`` when the request ends; at admission the
  request *reserves* what it may use (its ``max_tokens`` or ``max_completion_tokens``, plus its
  prompt estimated at a token per 4 bytes of the body), so a burst cannot overrun the limit
  before the answers report; the reservation is replaced by the real count at the end;
- **concurrent requests**: those admitted and not finished;
- **a token quota** per UTC day or month: tokens used in the period so far, read from
  ``usage_records`` the first time the key is seen in a period (so it holds across server
  restarts), plus what was used since.

``LimitCounters`` is the state this needs; ``InProcessCounters`` keeps it in the process. With
several gateway workers it is to be backed by the shared counters of the worker design
(``docs/architecture.md``: one row per worker, read as column sums) and the quota by the main
process's decision broadcast; until then each worker limits on its own.

Usage::

    limiter = KeyLimiter(counters=InProcessCounters(), quota_used=read_quota_used)
    admission = limiter.admit(facts.id, facts.limits, payload, body_bytes=len(body))  # or LimitExceeded
    ...
    limiter.finish(admission, used_tokens)
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from starlette.responses import Response

from modelyard.errors import TooManyRequests

QuotaPeriod = Literal["day", "month"]
WINDOW_S = 60.0
PROMPT_BYTES_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A key's limits; None: no limit of that kind."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent_requests: int | None = None
    token_quota: int | None = None
    quota_period: QuotaPeriod | None = None

    @property
    def any(self) -> bool:
        return any(
            value is not None
            for value in (
                self.requests_per_minute,
                self.tokens_per_minute,
                self.max_concurrent_requests,
                self.token_quota,
            )
        )


class LimitExceeded(TooManyRequests):
    """OpenAI's rate-limit error: ``type`` says which kind of limit, ``code`` is fixed."""

    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, limit_type: str, retry_after_seconds: int, hint: str | None = None):
        super().__init__(message, retry_after_seconds=retry_after_seconds, hint=hint)
        self.limit_type = limit_type


def limit_exceeded_response(error: LimitExceeded) -> Response:
    """OpenAI's 429: ``{"error": {"message", "type": "requests"|"tokens", "param", "code"}}``."""
    message = f"{error.message} ({error.hint})" if error.hint else error.message
    body = {"error": {"message": message, "type": error.limit_type, "param": None, "code": error.code}}
    return Response(
        json.dumps(body).encode(),
        status_code=429,
        media_type="application/json",
        headers={"Retry-After": str(error.retry_after_seconds)},
    )


def period_start(period: QuotaPeriod, now: datetime) -> datetime:
    """The start of the UTC day or month that ``now`` is in."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day if period == "day" else day.replace(day=1)


def _next_period_start(period: QuotaPeriod, now: datetime) -> datetime:
    start = period_start(period, now)
    if period == "day":
        return datetime.fromtimestamp(start.timestamp() + 86_400, UTC)
    return (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )


class LimitCounters(Protocol):
    """The counts limits are checked against, per key; one process or shared by workers."""

    def window(self, key_id: int, now: float) -> tuple[float, float, float]:
        """(requests, tokens) over the sliding minute at ``now``, and seconds into the current minute."""

    def add(self, key_id: int, now: float, *, requests: int, tokens: int) -> None: ...

    def in_flight(self, key_id: int) -> int: ...

    def change_in_flight(self, key_id: int, delta: int) -> None: ...


@dataclass
class _Window:
    minute: int = 0
    requests: int = 0
    tokens: int = 0
    previous_requests: int = 0
    previous_tokens: int = 0

    def roll(self, minute: int) -> None:
        if minute == self.minute:
            return
        if minute == self.minute + 1:
            self.previous_requests, self.previous_tokens = self.requests, self.tokens
        else:
            self.previous_requests = self.previous_tokens = 0
        self.minute, self.requests, self.tokens = minute, 0, 0


@dataclass
class InProcessCounters:
    """``LimitCounters`` in this process's memory (thread-safe)."""

    _windows: dict[int, _Window] = field(default_factory=dict)
    _in_flight: dict[int, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _window(self, key_id: int, now: float) -> _Window:
        window = self._windows.setdefault(key_id, _Window(minute=int(now // WINDOW_S)))
        window.roll(int(now // WINDOW_S))
        return window

    def window(self, key_id: int, now: float) -> tuple[float, float, float]:
        with self._lock:
            window = self._window(key_id, now)
            into = now - window.minute * WINDOW_S
            weight = 1.0 - into / WINDOW_S
            return (
                window.requests + window.previous_requests * weight,
                window.tokens + window.previous_tokens * weight,
                into,
            )

    def add(self, key_id: int, now: float, *, requests: int, tokens: int) -> None:
        with self._lock:
            window = self._window(key_id, now)
            window.requests += requests
            window.tokens += tokens

    def in_flight(self, key_id: int) -> int:
        return self._in_flight.get(key_id, 0)

    def change_in_flight(self, key_id: int, delta: int) -> None:
        with self._lock:
            self._in_flight[key_id] = max(0, self._in_flight.get(key_id, 0) + delta)


@dataclass
class Admission:
    """One admitted request: what it reserved, to be settled by ``KeyLimiter.finish``."""

    key_id: int
    reserved_tokens: int
    counted_in_flight: bool
    quota_period_start: datetime | None
    finished: bool = False


def reserved_tokens(payload: dict[str, Any], body_bytes: int) -> int:
    """What a request may use: its output cap plus its prompt estimated from the body's size."""
    cap = payload.get("max_completion_tokens", payload.get("max_tokens"))
    output = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else 0
    return output + body_bytes // PROMPT_BYTES_PER_TOKEN


@dataclass
class KeyLimiter:
    """Admits or refuses requests by their key's limits; see the module docstring."""

    counters: LimitCounters
    # Tokens a key used since the start of a period, from usage_records (blocking; called once
    # per key and period, then kept up to date here).
    quota_used: Callable[[int, datetime], int]
    clock: Callable[[], float] = time.time
    _quota: dict[tuple[int, datetime], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, key_id: int, limits: KeyLimits, payload: dict[str, Any], *, body_bytes: int) -> Admission:
        """Admit one request (counting it) or raise ``LimitExceeded``."""
        if not limits.any:
            return Admission(key_id, 0, counted_in_flight=False, quota_period_start=None)
        now = self.clock()
        reserve = reserved_tokens(payload, body_bytes)
        if limits.max_concurrent_requests is not None:
            running = self.counters.in_flight(key_id)
            if running >= limits.max_concurrent_requests:
                raise LimitExceeded(
                    f"concurrent requests limit reached: {running} of {limits.max_concurrent_requests} "
                    "requests of this key are running",
                    limit_type="requests",
                    retry_after_seconds=1,
                    hint="wait for an answer before the next request, or ask an admin for a higher limit",
                )
        requests, tokens, into = self.counters.window(key_id, now)
        if limits.requests_per_minute is not None and requests + 1 > limits.requests_per_minute:
            raise LimitExceeded(
                f"rate limit reached for requests per minute: limit {limits.requests_per_minute}, "
                f"used {math.ceil(requests)}",
                limit_type="requests",
                retry_after_seconds=_wait_s(into),
            )
        if limits.tokens_per_minute is not None and tokens + reserve > limits.tokens_per_minute:
            raise LimitExceeded(
                f"rate limit reached for tokens per minute: limit {limits.tokens_per_minute}, used "
                f"{math.ceil(tokens)}, requested {reserve} (max_tokens plus the prompt)",
                limit_type="tokens",
                retry_after_seconds=_wait_s(into),
                hint="lower max_tokens, or wait",
            )
        start = None
        if limits.token_quota is not None and limits.quota_period is not None:
            moment = datetime.fromtimestamp(now, UTC)
            start = period_start(limits.quota_period, moment)
            used = self._quota_used(key_id, start)
            if used + reserve > limits.token_quota:
                renewal = _next_period_start(limits.quota_period, moment)
                raise LimitExceeded(
                    f"token quota reached: {used} of {limits.token_quota} tokens this {limits.quota_period} "
                    f"(this request may use {reserve}); it renews at {renewal.isoformat()}",
                    limit_type="tokens",
                    retry_after_seconds=max(1, math.ceil(renewal.timestamp() - now)),
                    hint="ask an admin for a larger quota",
                )
            with self._lock:
                self._quota[(key_id, start)] = used + reserve
        self.counters.add(key_id, now, requests=1, tokens=reserve)
        counted = limits.max_concurrent_requests is not None
        if counted:
            self.counters.change_in_flight(key_id, 1)
        return Admission(key_id, reserve, counted_in_flight=counted, quota_period_start=start)

    def finish(self, admission: Admission, used_tokens: int) -> None:
        """The request ended having used ``used_tokens``: settle its reservation (once)."""
        if admission.finished:
            return
        admission.finished = True
        if admission.counted_in_flight:
            self.counters.change_in_flight(admission.key_id, -1)
        difference = used_tokens - admission.reserved_tokens
        if difference:
            self.counters.add(admission.key_id, self.clock(), requests=0, tokens=difference)
            if admission.quota_period_start is not None:
                with self._lock:
                    key = (admission.key_id, admission.quota_period_start)
                    self._quota[key] = self._quota.get(key, 0) + difference

    def quota_to_load(self, key_id: int, limits: KeyLimits) -> datetime | None:
        """The period start whose usage must be read (``load_quota``) before ``admit``; None: known."""
        if limits.token_quota is None or limits.quota_period is None:
            return None
        start = period_start(limits.quota_period, datetime.fromtimestamp(self.clock(), UTC))
        with self._lock:
            return None if (key_id, start) in self._quota else start

    def load_quota(self, key_id: int, start: datetime) -> None:
        """Read what the key used since ``start`` (blocking: call it in a worker thread)."""
        self._quota_used(key_id, start)

    def _quota_used(self, key_id: int, start: datetime) -> int:
        with self._lock:
            known = self._quota.get((key_id, start))
        if known is not None:
            return known
        used = self.quota_used(key_id, start)
        with self._lock:
            return self._quota.setdefault((key_id, start), used)


def _wait_s(seconds_into_minute: float) -> int:
    """Until the current minute ends and the window has slid past most of what filled it."""
    return max(1, math.ceil(WINDOW_S - seconds_into_minute))
