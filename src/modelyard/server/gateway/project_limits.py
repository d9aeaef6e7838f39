"""Quotas per project, on top of each key's and each deployment's limits (``limits.py``): tokens
per UTC day and per UTC month, and requests at once, for every key of the project together.

A request is checked against its key's project before its key's own limits; a refusal is
OpenAI's ``429`` (``code: rate_limit_exceeded``) whose message names the project and the limit,
with ``Retry-After`` (the quota's renewal; 1 s for requests at once), or without it when the
request alone is more than the quota.

- **requests at once**: counted in the shared counters (``limit_counters.py``, one row per
  gateway worker, summed at each check), so they hold for the workers together, to within
  ``workers - 1`` admissions decided at the same instant;
- **tokens per day / month**: what ``usage_records`` holds for the project's keys since the
  period began, read again at most every ``refresh_s`` (in a worker thread, off the request
  path), plus what this process has reserved for its running requests and what its finished
  requests used since that read. As with a key's quota, a request reserves its ``max_tokens``
  plus its prompt estimated from the body; the reservation is replaced by the real count when
  it ends. What goes unseen: other workers' running requests and the usage rows not yet written
  (about 0.1 s of them), for at most ``refresh_s``.

Usage::

    limiter = ProjectLimiter(SlidingCounters.for_projects(shared), partial(project_tokens_since, db))
    for period, start in limiter.to_read(project):
        await asyncio.to_thread(limiter.read, project.project_id, period, start)
    admission = limiter.admit(project, reserve)      # LimitExceeded naming the project
    ...
    limiter.finish(admission, used_tokens)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import func, select

from modelyard.server.gateway.limit_counters import SlidingCounters
from modelyard.server.gateway.limits import LimitExceeded, QuotaPeriod, next_period_start, period_start
from modelyard.store.database import Database
from modelyard.store.tables import ApiKey, UsageRecord

REFRESH_S = 2.0
PERIODS: tuple[QuotaPeriod, ...] = ("day", "month")


@dataclass(frozen=True, slots=True)
class ProjectLimits:
    """A project's quotas as the gateway holds them with each key (None: no limit of that kind)."""

    project_id: int
    name: str
    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    max_concurrent_requests: int | None = None

    @property
    def any(self) -> bool:
        return any(
            value is not None
            for value in (self.tokens_per_day, self.tokens_per_month, self.max_concurrent_requests)
        )

    def quota(self, period: QuotaPeriod) -> int | None:
        return self.tokens_per_day if period == "day" else self.tokens_per_month


@dataclass
class ProjectAdmission:
    """One request admitted by its project's quotas, to be settled by ``ProjectLimiter.finish``."""

    project_id: int
    reserved_tokens: int
    in_flight: bool
    # The quota periods it reserved tokens in.
    periods: list[tuple[QuotaPeriod, datetime]]
    finished: bool = False


_Key = tuple[int, QuotaPeriod, datetime]


def project_tokens_since(database: Database, project_id: int, since: datetime) -> int:
    """Prompt and completion tokens of requests made with the project's keys since ``since``."""
    with database.session() as session:
        total = session.scalar(
            select(func.coalesce(func.sum(UsageRecord.prompt_tokens + UsageRecord.completion_tokens), 0))
            .join(ApiKey, ApiKey.id == UsageRecord.api_key_id)
            .where(ApiKey.project_id == project_id, UsageRecord.at >= since)
        )
    return int(total or 0)


@dataclass
class ProjectLimiter:
    """Admits or refuses requests by their project's quotas (module docstring)."""

    counters: SlidingCounters
    # Tokens the project's keys used since a moment, from usage_records (blocking).
    tokens_used: Callable[[int, datetime], int]
    clock: Callable[[], float] = time.time
    refresh_s: float = REFRESH_S
    # Per (project, period, period start): what usage_records said, and when it was read.
    _recorded: dict[_Key, tuple[int, float]] = field(default_factory=dict)
    # This process's reservations of running requests, and the tokens of its requests that
    # finished since the last read.
    _running: dict[_Key, int] = field(default_factory=dict)
    _finished: dict[_Key, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _starts(self, limits: ProjectLimits, now: float) -> list[tuple[QuotaPeriod, datetime]]:
        moment = datetime.fromtimestamp(now, UTC)
        return [
            (period, period_start(period, moment)) for period in PERIODS if limits.quota(period) is not None
        ]

    def to_read(self, limits: ProjectLimits) -> list[tuple[QuotaPeriod, datetime]]:
        """The quota periods whose usage must be read (``read``) before ``admit``: unknown or stale."""
        now = self.clock()
        with self._lock:
            return [
                (period, start)
                for period, start in self._starts(limits, now)
                if (known := self._recorded.get((limits.project_id, period, start))) is None
                or now - known[1] >= self.refresh_s
            ]

    def read(self, project_id: int, period: QuotaPeriod, start: datetime) -> None:
        """Read what the project used since ``start`` (blocking: call it in a worker thread)."""
        read_at = self.clock()
        used = self.tokens_used(project_id, start)
        with self._lock:
            key = (project_id, period, start)
            self._recorded[key] = (used, read_at)
            self._finished.pop(key, None)

    def used(self, project_id: int, period: QuotaPeriod, start: datetime) -> int:
        """Tokens the project used in the period, as this process knows (module docstring)."""
        key = (project_id, period, start)
        with self._lock:
            recorded = self._recorded.get(key, (0, 0.0))[0]
            return recorded + self._running.get(key, 0) + self._finished.get(key, 0)

    def admit(self, limits: ProjectLimits, reserve: int) -> ProjectAdmission | None:
        """Admit one request reserving ``reserve`` tokens (counting it) or raise ``LimitExceeded``;
        None when the project has no limits. Nothing is counted for a refused request."""
        if not limits.any:
            return None
        now = self.clock()
        refusals: list[LimitExceeded] = []
        if limits.max_concurrent_requests is not None:
            running = self.counters.in_flight(limits.project_id)
            if running >= limits.max_concurrent_requests:
                refusals.append(
                    LimitExceeded(
                        f"project {limits.name!r} reached its limit of {limits.max_concurrent_requests} "
                        f"requests at once: {running} of its keys' requests are running",
                        limit_type="requests",
                        retry_after_seconds=1,
                        hint=f"wait for an answer before the next request, or ask an admin to raise project "
                        f"{limits.name!r}'s max_concurrent_requests (PATCH /api/v1/projects/{limits.name})",
                    )
                )
        starts = self._starts(limits, now)
        for period, start in starts:
            refusal = self._quota_refusal(limits, period, start, reserve, now)
            if refusal is not None:
                refusals.append(refusal)
        if refusals:
            raise max(refusals, key=lambda refusal: (refusal.never, refusal.retry_after_seconds))
        in_flight = limits.max_concurrent_requests is not None
        if in_flight:
            self.counters.change_in_flight(limits.project_id, 1)
        with self._lock:
            for period, start in starts:
                key = (limits.project_id, period, start)
                self._running[key] = self._running.get(key, 0) + reserve
        return ProjectAdmission(limits.project_id, reserve, in_flight, starts)

    def _quota_refusal(
        self, limits: ProjectLimits, period: QuotaPeriod, start: datetime, reserve: int, now: float
    ) -> LimitExceeded | None:
        quota = limits.quota(period)
        assert quota is not None
        knob = f"tokens_per_{period}"
        hint = (
            f"ask an admin to raise project {limits.name!r}'s {knob} (PATCH /api/v1/projects/{limits.name})"
        )
        if reserve > quota:
            return LimitExceeded(
                f"this request may use {reserve} tokens (max_tokens plus the prompt), more than project "
                f"{limits.name!r}'s whole quota of {quota} tokens per {period}",
                limit_type="tokens",
                retry_after_seconds=1,
                hint=f"lower max_tokens or send a shorter prompt, or {hint}",
                never=True,
            )
        used = self.used(limits.project_id, period, start)
        if used + reserve <= quota:
            return None
        renewal = next_period_start(period, datetime.fromtimestamp(now, UTC))
        return LimitExceeded(
            f"project {limits.name!r} reached its token quota: {used} of {quota} tokens per {period} used "
            f"(this request may use {reserve}); it renews at {renewal.isoformat()}",
            limit_type="tokens",
            retry_after_seconds=max(1, int(renewal.timestamp() - now) + 1),
            hint=hint,
        )

    def finish(self, admission: ProjectAdmission, used_tokens: int) -> None:
        """The request ended having used ``used_tokens`` (0 when it was never sent): settle it once."""
        if admission.finished:
            return
        admission.finished = True
        if admission.in_flight:
            self.counters.change_in_flight(admission.project_id, -1)
        with self._lock:
            for period, start in admission.periods:
                key = (admission.project_id, period, start)
                self._running[key] = self._running.get(key, 0) - admission.reserved_tokens
                if used_tokens:
                    self._finished[key] = self._finished.get(key, 0) + used_tokens
