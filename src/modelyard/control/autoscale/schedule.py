"""Schedules beside load: ``autoscale.schedule``, minimum replicas for windows of time.

Each entry starts a window at every time its cron expression names (five fields: minute, hour,
day of month, month, day of week, read in ``timezone``) and keeps it for ``duration``; while a
window is open the autoscaler keeps at least the entry's ``min`` replicas. The load rule still
applies above it: the desired count is max(load rule, schedule minimum), at most ``max``.

Usage::

    entry = ScheduleEntry.model_validate(
        {"cron": "0 8 * * 1-5", "duration": "10h", "min": 2, "timezone": "Europe/Paris"}
    )
    schedule_minimum([entry], datetime(2026, 12, 7, 9, 0, tzinfo=UTC))   # (2, "'0 8 * * 1-5' ...")

The clock is the caller's (``loop.py`` passes its injected wall clock), so tests need no sleeps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAXIMUM_SCHEDULE_ENTRIES = 32
MAXIMUM_DURATION = timedelta(days=7)
_DURATION_PART = re.compile(r"(\d+)([dhms])")
_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_EXAMPLE = "e.g. '0 8 * * 1-5' (08:00, Monday to Friday)"


def parse_duration(text: str) -> timedelta:
    """``"10h"``, ``"90m"``, ``"1h30m"``, ``"2d"``: a positive duration of at most 7 days."""
    compact = text.strip().replace(" ", "")
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(number + unit for number, unit in parts) != compact:
        raise ValueError(
            f"duration {text!r} is not a duration: write numbers with units d, h, m or s, "
            "e.g. '10h', '90m' or '1h30m'"
        )
    seconds = sum(int(number) * _DURATION_UNITS[unit] for number, unit in parts)
    duration = timedelta(seconds=seconds)
    if duration <= timedelta(0) or duration > MAXIMUM_DURATION:
        raise ValueError(f"duration {text!r} must be more than 0 and at most 7 days ('7d')")
    return duration


class ScheduleEntry(BaseModel):
    """At least ``min`` replicas for ``duration`` from each time ``cron`` names, in ``timezone``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cron: str
    duration: str
    min: int = Field(ge=0, le=64)
    timezone: str = "UTC"
    # How decisions name it ("schedule 'working hours' keeps at least 2 replica(s)").
    name: str | None = Field(default=None, max_length=80)

    @field_validator("cron")
    @classmethod
    def _check_cron(cls, value: str) -> str:
        fields = value.split()
        if len(fields) != 5:
            raise ValueError(
                f"cron {value!r} has {len(fields)} field(s); write five (minute hour day-of-month "
                f"month day-of-week), {_EXAMPLE}"
            )
        if not croniter.is_valid(value):
            raise ValueError(f"cron {value!r} is not a valid cron expression: {_EXAMPLE}")
        return " ".join(fields)

    @field_validator("duration")
    @classmethod
    def _check_duration(cls, value: str) -> str:
        parse_duration(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _check_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"timezone {value!r} is not known: write an IANA name such as 'Europe/Paris', "
                "'America/New_York' or 'UTC'"
            ) from None
        return value

    @model_validator(mode="after")
    def _check_name(self) -> Self:
        if self.name is not None and not self.name.strip():
            raise ValueError("name is empty: leave it out, or name the window (e.g. 'working hours')")
        return self

    @property
    def label(self) -> str:
        if self.name:
            return repr(self.name)
        return f"'{self.cron}' for {self.duration} ({self.timezone})"

    def window_at(self, now: datetime) -> tuple[datetime, datetime] | None:
        """The window open at ``now`` (timezone-aware), as (start, end), or None."""
        local = now.astimezone(ZoneInfo(self.timezone))
        minute = local.replace(second=0, microsecond=0)
        on_time = croniter.match(self.cron, minute)
        start = minute if on_time else croniter(self.cron, local).get_prev(datetime)
        end = start + parse_duration(self.duration)
        return (start, end) if start <= local < end else None


def schedule_minimum(entries: Sequence[ScheduleEntry], now: datetime) -> tuple[int, str]:
    """The highest minimum of the entries open at ``now`` and the entry's label; (0, "") when none."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    best, label = 0, ""
    for entry in entries:
        if entry.min > best and entry.window_at(now) is not None:
            best, label = entry.min, entry.label
    return best, label
