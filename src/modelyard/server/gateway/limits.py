"""Limits per API key and per deployment: requests and tokens per minute, requests at once, and a
token quota per period for keys.

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
- **a token quota** per UTC day or month (keys only): tokens used in the period so far, read
  from ``usage_records`` the first time the key is seen in a period (so it holds across server
  restarts), plus what was used since.

``Retry-After`` is the time until a retry would be admitted by every limit that holds for the
request, were nothing else counted meanwhile, in whole seconds rounded up (RFC 9110): for a
per-minute limit, when enough of the previous minute (or, past its end, of this one) has slid
out of the window (``seconds_until_room``); for a quota, its renewal; for requests at once, 1 s
(one of them may end at any moment). A request that alone is more than a limit (``max_tokens``
above the tokens per minute or the quota) is refused without ``Retry-After``: waiting never helps.

A deployment's limits (``DeploymentLimits``, from the endpoint registry) hold for every key
together; a request must pass both its key's and its deployment's.

Across gateway workers: the per-minute and concurrency counts are the shared counters
(``limit_counters.py``: one row per worker, summed at each check), so they hold for the workers
together, to within ``workers - 1`` admissions decided at the same instant. A quota is checked
against what the main process broadcasts as recorded from every worker (``QuotaUsage``, from
``quota_ledger.py``) plus what this worker has running or has finished and the main process has
not acknowledged yet: only the other workers' requests finished within the last usage batch
(about 0.1 s) and their running reservations go unseen. Before the first broadcast for a key,
a worker counts on its own from what ``usage_records`` said when it first saw the key.

Usage::

    limiter = Limiter(SlidingCounters.for_keys(shared), SlidingCounters.for_deployments(shared),
                      quota_used=read_quota_used)
    admission = limiter.admit(facts.id, facts.limits, payload, body_bytes=len(body),
                              deployment=registry.limits_for(model), deployment_name=model)
    ...
    limiter.finish(admission, used_tokens)
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from modelyard.control.endpoints import DeploymentLimits
from modelyard.errors import TooManyRequests
from modelyard.server.gateway.limit_counters import Window
from modelyard.services.keys import quota_period_start

if TYPE_CHECKING:
    from modelyard.server.gateway.project_limits import ProjectAdmission

QuotaPeriod = Literal["day", "month"]
WINDOW_S = 60.0
PROMPT_BYTES_PER_TOKEN = 4
# Counts are weighted floats: a window within this of its limit is at the limit (a retry at the
# Retry-After computed from the same counts is admitted, whatever the rounding).
_SLACK = 1e-6


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
    """OpenAI's rate-limit error: ``type`` says which kind of limit, ``code`` is fixed.

    ``retry_after_seconds``: when a retry would be admitted, were nothing else counted meanwhile;
    ``never``: the request alone is more than the limit (sent without ``Retry-After``)."""

    code = "rate_limit_exceeded"

    def __init__(
        self,
        message: str,
        *,
        limit_type: str,
        retry_after_seconds: int,
        hint: str | None = None,
        never: bool = False,
    ):
        super().__init__(message, retry_after_seconds=retry_after_seconds, hint=hint)
        self.limit_type = limit_type
        self.never = never


def period_start(period: QuotaPeriod, now: datetime) -> datetime:
    """The start of the UTC day or month that ``now`` is in."""
    return quota_period_start(period, now)


def next_period_start(period: QuotaPeriod, now: datetime) -> datetime:
    """The start of the UTC day or month after the one ``now`` is in (a quota's renewal)."""
    start = period_start(period, now)
    if period == "day":
        return datetime.fromtimestamp(start.timestamp() + 86_400, UTC)
    return (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )


class LimitCounters(Protocol):
    """The counts limits are checked against, per key or deployment id (``limit_counters.py``)."""

    def window(self, identifier: int, now: float) -> Window:
        """The current and the previous minute's counts at ``now``."""

    def add(self, identifier: int, now: float, *, requests: int, tokens: int) -> None: ...

    def in_flight(self, identifier: int) -> int: ...

    def change_in_flight(self, identifier: int, delta: int) -> None: ...


@dataclass
class Admission:
    """One admitted request: what it reserved, to be settled by ``Limiter.finish``."""

    key_id: int
    reserved_tokens: int
    counted_in_flight: bool
    quota_period_start: datetime | None
    # Whether the key's counters hold it (the key has limits).
    key_counted: bool = False
    # The deployment whose limits counted it (None: it has none).
    deployment_id: int | None = None
    deployment_in_flight: bool = False
    finished: bool = False
    # What the key's project admitted (``project_limits.py``), settled with it.
    project: ProjectAdmission | None = None


def reserved_tokens(payload: dict[str, Any], body_bytes: int) -> int:
    """What a request may use: its output cap plus its prompt estimated from the body's size."""
    cap = payload.get("max_completion_tokens", payload.get("max_tokens"))
    output = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else 0
    return output + body_bytes // PROMPT_BYTES_PER_TOKEN


@dataclass(frozen=True)
class _Rates:
    """One set of per-minute and concurrency limits and whose they are, for the messages."""

    requests_per_minute: int | None
    tokens_per_minute: int | None
    max_concurrent_requests: int | None
    # "" for a key (the message is about the key used); " of deployment 'chat'" for a deployment.
    of: str
    owner: str
    hint: str


def _check_rates(counters: LimitCounters, identifier: int, rates: _Rates, reserve: int, now: float) -> None:
    """``LimitExceeded`` unless one more request reserving ``reserve`` tokens fits every limit of
    ``rates``; its ``Retry-After`` is when it would fit all of them (the longest of their waits)."""
    refusals: list[LimitExceeded] = []
    if rates.max_concurrent_requests is not None:
        running = counters.in_flight(identifier)
        if running >= rates.max_concurrent_requests:
            refusals.append(
                LimitExceeded(
                    f"concurrent requests limit{rates.of} reached: {running} of "
                    f"{rates.max_concurrent_requests} requests of {rates.owner} are running",
                    limit_type="requests",
                    # Unknown: as soon as one of them ends.
                    retry_after_seconds=1,
                    hint=f"wait for an answer before the next request, or {rates.hint}",
                )
            )
    window = counters.window(identifier, now)
    if rates.requests_per_minute is not None and window.requests + 1 > rates.requests_per_minute + _SLACK:
        wait_s = seconds_until_room(
            window.current_requests, window.previous_requests, window.into_s, rates.requests_per_minute - 1
        )
        refusals.append(
            LimitExceeded(
                f"rate limit{rates.of} reached for requests per minute: limit {rates.requests_per_minute}, "
                f"used {math.ceil(window.requests - _SLACK)}",
                limit_type="requests",
                retry_after_seconds=_whole_seconds(wait_s),
                hint=f"wait, or {rates.hint}",
                never=wait_s is None,
            )
        )
    if rates.tokens_per_minute is not None and window.tokens + reserve > rates.tokens_per_minute + _SLACK:
        wait_s = seconds_until_room(
            window.current_tokens, window.previous_tokens, window.into_s, rates.tokens_per_minute - reserve
        )
        if wait_s is None:
            message = (
                f"this request may use {reserve} tokens (max_tokens plus the prompt), more than the "
                f"limit{rates.of} of {rates.tokens_per_minute} tokens per minute"
            )
        else:
            message = (
                f"rate limit{rates.of} reached for tokens per minute: limit {rates.tokens_per_minute}, used "
                f"{math.ceil(window.tokens - _SLACK)}, requested {reserve} (max_tokens plus the prompt)"
            )
        refusals.append(
            LimitExceeded(
                message,
                limit_type="tokens",
                retry_after_seconds=_whole_seconds(wait_s),
                hint=f"lower max_tokens, wait, or {rates.hint}"
                if wait_s is not None
                else f"lower max_tokens or send a shorter prompt, or {rates.hint}",
                never=wait_s is None,
            )
        )
    if refusals:
        raise longest(refusals)


def longest(refusals: list[LimitExceeded]) -> LimitExceeded:
    """The refusal to send when several limits refuse: one that can never pass, else the one
    whose wait is longest (by then every other limit has room too)."""
    return max(refusals, key=lambda refusal: (refusal.never, refusal.retry_after_seconds))


def seconds_until_room(current: float, previous: float, into_s: float, allowed: float) -> float | None:
    """Seconds from now until the sliding minute holds at most ``allowed`` (requests or tokens),
    with nothing more counted meanwhile; None when it never will (``allowed`` below zero).

    At ``x`` seconds into the current minute the window holds ``current + previous * (1 - x/60)``;
    after the minute ends, ``current * (1 - y/60)`` at ``y`` seconds into the next; then nothing.
    """
    if allowed < 0:
        return None
    if current + previous * (1.0 - into_s / WINDOW_S) <= allowed + _SLACK:
        return 0.0
    if current <= allowed:
        # Within this minute, as the previous minute slides out (previous > 0 here).
        into_then_s = WINDOW_S * (1.0 - (allowed - current) / previous)
        return max(0.0, into_then_s - into_s)
    # In the next minute, as this minute slides out (current > allowed >= 0 here).
    return (WINDOW_S - into_s) + WINDOW_S * (1.0 - allowed / current)


def _whole_seconds(wait_s: float | None) -> int:
    """Retry-After: whole seconds, rounded up (RFC 9110), at least 1."""
    return 1 if wait_s is None else max(1, math.ceil(wait_s - _SLACK))


def _count(counters: LimitCounters, identifier: int, rates: _Rates, reserve: int, now: float) -> bool:
    counters.add(identifier, now, requests=1, tokens=reserve)
    if rates.max_concurrent_requests is None:
        return False
    counters.change_in_flight(identifier, 1)
    return True


@dataclass
class Limiter:
    """Admits or refuses requests by their key's and their deployment's limits (module docstring)."""

    # The counts per key and per deployment: shared by every gateway worker (limit_counters.py).
    key_counters: LimitCounters
    deployment_counters: LimitCounters
    # Tokens a key used since the start of a period, from usage_records (blocking; called once
    # per key and period, then kept up to date here).
    quota_used: Callable[[int, datetime], int]
    clock: Callable[[], float] = time.time
    # This process's estimate per (key, period start): what usage_records said when the key was
    # first seen in the period, plus what this process admitted since (reservations, then settled).
    _quota: dict[tuple[int, datetime], int] = field(default_factory=dict)
    # In a gateway worker: the journal sequence of the last usage row this worker made; rows up to
    # a sequence are acknowledged by the main process (``quota_committed``). None: not a worker.
    last_usage_sequence: Callable[[], int] | None = None
    # What the main process last said was recorded from every worker (QuotaUsage), what this
    # process has reserved for requests still running, and the tokens of its finished requests
    # that the main process has not acknowledged yet (each with its journal sequence).
    _recorded: dict[tuple[int, datetime], int] = field(default_factory=dict)
    _quota_running: dict[tuple[int, datetime], int] = field(default_factory=dict)
    _unacknowledged: deque[tuple[int, tuple[int, datetime], int]] = field(default_factory=deque)
    _unacknowledged_tokens: dict[tuple[int, datetime], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(
        self,
        key_id: int,
        limits: KeyLimits,
        payload: dict[str, Any],
        *,
        body_bytes: int,
        deployment: DeploymentLimits | None = None,
        deployment_name: str = "",
    ) -> Admission:
        """Admit one request (counting it) or raise ``LimitExceeded``; nothing is counted for a
        refused request. The checks and the counting are one synchronous step."""
        deployment_rates = _deployment_rates(deployment, deployment_name)
        if not limits.any and deployment_rates is None:
            return Admission(key_id, 0, counted_in_flight=False, quota_period_start=None)
        now = self.clock()
        reserve = reserved_tokens(payload, body_bytes)
        key_rates = _Rates(
            limits.requests_per_minute,
            limits.tokens_per_minute,
            limits.max_concurrent_requests,
            of="",
            owner="this key",
            hint="ask an admin for a higher limit",
        )
        # Every limit is checked, so that Retry-After is when all of them would admit the retry.
        refusals: list[LimitExceeded] = []
        checks: list[Callable[[], object]] = []
        if limits.any:
            checks.append(lambda: _check_rates(self.key_counters, key_id, key_rates, reserve, now))
        if deployment is not None and deployment_rates is not None:
            deployment_id = deployment.deployment_id
            checks.append(
                lambda: _check_rates(self.deployment_counters, deployment_id, deployment_rates, reserve, now)
            )
        if limits.token_quota is not None and limits.quota_period is not None:
            checks.append(lambda: self._check_quota(key_id, limits, reserve, now, count=False))
        for check in checks:
            try:
                check()
            except LimitExceeded as refusal:
                refusals.append(refusal)
        if refusals:
            raise longest(refusals)
        start = None
        if limits.token_quota is not None and limits.quota_period is not None:
            start = self._check_quota(key_id, limits, reserve, now)
        admission = Admission(
            key_id,
            reserve,
            counted_in_flight=limits.any and _count(self.key_counters, key_id, key_rates, reserve, now),
            quota_period_start=start,
            key_counted=limits.any,
        )
        if deployment is not None and deployment_rates is not None:
            admission.deployment_id = deployment.deployment_id
            admission.deployment_in_flight = _count(
                self.deployment_counters, deployment.deployment_id, deployment_rates, reserve, now
            )
        return admission

    def _check_quota(
        self, key_id: int, limits: KeyLimits, reserve: int, now: float, *, count: bool = True
    ) -> datetime:
        """``LimitExceeded`` unless the request fits the key's quota; reserves it when ``count``."""
        assert limits.token_quota is not None and limits.quota_period is not None
        moment = datetime.fromtimestamp(now, UTC)
        start = period_start(limits.quota_period, moment)
        if reserve > limits.token_quota:
            raise LimitExceeded(
                f"this request may use {reserve} tokens (max_tokens plus the prompt), more than the "
                f"key's whole quota of {limits.token_quota} tokens per {limits.quota_period}",
                limit_type="tokens",
                retry_after_seconds=1,
                hint="lower max_tokens or send a shorter prompt, or ask an admin for a larger quota",
                never=True,
            )
        used = self.quota_estimate(key_id, start)
        if used + reserve > limits.token_quota:
            renewal = next_period_start(limits.quota_period, moment)
            # At the renewal the quota is whole again; requests running now may end having used
            # less than they reserved, which only makes room sooner.
            raise LimitExceeded(
                f"token quota reached: {used} of {limits.token_quota} tokens this {limits.quota_period} "
                f"(this request may use {reserve}); it renews at {renewal.isoformat()}",
                limit_type="tokens",
                retry_after_seconds=_whole_seconds(renewal.timestamp() - now),
                hint="ask an admin for a larger quota",
            )
        if not count:
            return start
        with self._lock:
            key = (key_id, start)
            self._quota[key] = self._quota.get(key, 0) + reserve
            self._quota_running[key] = self._quota_running.get(key, 0) + reserve
        return start

    def finish(self, admission: Admission, used_tokens: int) -> None:
        """The request ended having used ``used_tokens``: settle its reservation (once)."""
        if admission.finished:
            return
        admission.finished = True
        if admission.counted_in_flight:
            self.key_counters.change_in_flight(admission.key_id, -1)
        if admission.deployment_in_flight and admission.deployment_id is not None:
            self.deployment_counters.change_in_flight(admission.deployment_id, -1)
        difference = used_tokens - admission.reserved_tokens
        now = self.clock()
        if difference and admission.key_counted:
            self.key_counters.add(admission.key_id, now, requests=0, tokens=difference)
        if difference and admission.deployment_id is not None:
            self.deployment_counters.add(admission.deployment_id, now, requests=0, tokens=difference)
        if admission.quota_period_start is not None:
            with self._lock:
                key = (admission.key_id, admission.quota_period_start)
                self._quota[key] = self._quota.get(key, 0) + difference
                self._quota_running[key] = self._quota_running.get(key, 0) - admission.reserved_tokens
                if self.last_usage_sequence is not None and used_tokens:
                    # Call after the request's usage row was recorded: it has this sequence.
                    self._unacknowledged.append((self.last_usage_sequence(), key, used_tokens))
                    self._unacknowledged_tokens[key] = self._unacknowledged_tokens.get(key, 0) + used_tokens

    def quota_committed(self, through_sequence: int) -> None:
        """This worker's usage rows up to ``through_sequence`` are in ``usage_records`` (and so in
        the totals of the ``QuotaUsage`` the main process sent just before saying so)."""
        with self._lock:
            while self._unacknowledged and self._unacknowledged[0][0] <= through_sequence:
                _sequence, key, tokens = self._unacknowledged.popleft()
                left = self._unacknowledged_tokens.get(key, 0) - tokens
                if left > 0:
                    self._unacknowledged_tokens[key] = left
                else:
                    self._unacknowledged_tokens.pop(key, None)

    def quota_recorded(self, key_id: int, start: datetime, used_tokens: int) -> None:
        """The main process says ``key_id`` has ``used_tokens`` recorded since ``start`` (all workers)."""
        with self._lock:
            key = (key_id, start)
            self._recorded[key] = max(self._recorded.get(key, 0), used_tokens)

    def quota_estimate(self, key_id: int, start: datetime) -> int:
        """Tokens the key has used in the period that starts at ``start``, as this process knows:
        once the main process has said what is recorded from every worker, that plus this worker's
        running reservations and finished requests not yet recorded; before, this process's count
        (what ``usage_records`` said at first sight, plus what it admitted since)."""
        local = self._quota_used(key_id, start)
        with self._lock:
            key = (key_id, start)
            recorded = self._recorded.get(key)
            if recorded is None:
                return local
            return recorded + self._quota_running.get(key, 0) + self._unacknowledged_tokens.get(key, 0)

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


def _deployment_rates(deployment: DeploymentLimits | None, name: str) -> _Rates | None:
    if deployment is None or not deployment.any:
        return None
    return _Rates(
        deployment.requests_per_minute,
        deployment.tokens_per_minute,
        deployment.max_concurrent_requests,
        of=f" of deployment {name!r}",
        owner=f"deployment {name!r}",
        hint=f"ask an admin to raise the limits of deployment {name!r} "
        "(`modelyard deploy --rpm/--tpm/--max-concurrent`, or PATCH its limits)",
    )
