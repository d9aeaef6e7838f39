"""Usage a team can read: requests, tokens and errors grouped by project, user, key or
deployment, per hour or day (or over the whole range), within ``[since, until)``.

The rows come from ``usage_records`` (one per gateway request, ``server/gateway/usage.py``):
a request's project and user are its key's (``api_keys.project_id``, ``api_keys.owner_id``).
The time buckets are made in SQL, in UTC, by ``strftime`` on SQLite and ``to_char`` on
PostgreSQL. Time to first token (``usage_records.ttft_ms``, recorded by the gateway since
revision 0015) is reported as the median and 90th percentile of the requests that have one,
per group and bucket (linear interpolation between the two nearest values, as PostgreSQL's
``percentile_cont``), computed here from the values, the same on both databases.

Usage::

    window = parse_range("7d", None, bucket="day", now=utc_now())
    report = usage_report(session, group_by="project", bucket="day", window=window)
    report.to_csv()
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

from sqlalchemy import ColumnElement, Select, func, literal_column, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from modelyard.errors import InvalidInput
from modelyard.store.tables import ApiKey, Project, UsageRecord, User

Dimension = Literal["project", "user", "key", "deployment"]
"""What the report groups requests by (external API: ``group_by``)."""
Bucket = Literal["hour", "day"]
"""The time bucket (external API: ``bucket``); None: one row per group over the whole range."""

DIMENSIONS: tuple[str, ...] = get_args(Dimension)
BUCKETS: tuple[str, ...] = get_args(Bucket)
DEFAULT_RANGE = timedelta(days=7)
# The longest range each bucket may cover (hours: 744 buckets; days and totals: a year).
MAXIMUM_RANGE: dict[Bucket | None, timedelta] = {
    "hour": timedelta(days=31),
    "day": timedelta(days=366),
    None: timedelta(days=366),
}
# What a request with no key (or a key since removed), or a key without an owner, is shown as.
NO_KEY = "(no key)"
NO_OWNER = "(no owner)"

_SPAN = re.compile(r"(\d+)([mhdw])")
_SPAN_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_FORMATS: dict[Bucket, tuple[str, str]] = {
    # (SQLite strftime, PostgreSQL to_char): the bucket's start as ISO 8601 in UTC.
    "hour": ("%Y-%m-%dT%H:00:00Z", 'YYYY-MM-DD"T"HH24":00:00Z"'),
    "day": ("%Y-%m-%dT00:00:00Z", 'YYYY-MM-DD"T00:00:00Z"'),
}
CSV_FIELDS = (
    "bucket_start",
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "errors",
    "requests_without_usage",
    "ttft_p50_ms",
    "ttft_p90_ms",
)


@dataclass(frozen=True)
class UsageWindow:
    """The range ``[since, until)``, both aware UTC datetimes."""

    since: datetime
    until: datetime


@dataclass(frozen=True)
class UsageReportRow:
    group: str
    """The project, username, key name or deployment name (or ``NO_KEY`` / ``NO_OWNER``)."""
    bucket_start: str | None
    """The bucket's start, ISO 8601 UTC (None: the whole range)."""
    requests: int
    prompt_tokens: int
    completion_tokens: int
    errors: int
    """Requests answered with a status of 400 or more."""
    requests_without_usage: int
    """Requests whose engine reported no token counts (counted, never guessed)."""
    ttft_p50_ms: float | None = None
    """The median time to first token of the requests that have one (None: none has)."""
    ttft_p90_ms: float | None = None
    """Their 90th percentile."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "total_tokens": self.total_tokens}


@dataclass(frozen=True)
class UsageReport:
    group_by: Dimension
    bucket: Bucket | None
    window: UsageWindow
    rows: list[UsageReportRow]
    """By group, then bucket, oldest first; a bucket without requests has no row."""
    ttft_ms: tuple[float | None, float | None] = (None, None)
    """The median and 90th percentile time to first token of every request in the report."""

    def bucket_starts(self) -> list[str]:
        """Every bucket's start in the range, with or without requests (for charts)."""
        if self.bucket is None:
            return []
        step = timedelta(hours=1) if self.bucket == "hour" else timedelta(days=1)
        start = _bucket_floor(self.window.since, self.bucket)
        starts = []
        while start < self.window.until:
            starts.append(start.strftime("%Y-%m-%dT%H:%M:%SZ"))
            start += step
        return starts

    def totals(self) -> dict[str, int | float | None]:
        totals = {
            name: sum(getattr(row, name) for row in self.rows)
            for name in ("requests", "prompt_tokens", "completion_tokens", "errors", "requests_without_usage")
        }
        return {
            **totals,
            "total_tokens": totals["prompt_tokens"] + totals["completion_tokens"],
            "ttft_p50_ms": self.ttft_ms[0],
            "ttft_p90_ms": self.ttft_ms[1],
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "group_by": self.group_by,
            "bucket": self.bucket,
            "since": _iso(self.window.since),
            "until": _iso(self.window.until),
            "buckets": self.bucket_starts(),
            "totals": self.totals(),
            "rows": [row.to_json() for row in self.rows],
        }

    def to_csv(self) -> str:
        """One line per row: the group's column (named after ``group_by``), then ``CSV_FIELDS``."""
        output = io.StringIO()
        writer = csv.writer(output, lineterminator="\n")
        writer.writerow([self.group_by, *CSV_FIELDS])
        for row in self.rows:
            values = {**row.to_json(), "bucket_start": row.bucket_start or _iso(self.window.since)}
            writer.writerow(
                [row.group, *("" if values[name] is None else values[name] for name in CSV_FIELDS)]
            )
        return output.getvalue()

    def csv_filename(self) -> str:
        day = "%Y%m%dT%H%MZ"
        return (
            f"modelyard-usage-by-{self.group_by}-"
            f"{self.window.since.strftime(day)}-{self.window.until.strftime(day)}.csv"
        )


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _bucket_floor(moment: datetime, bucket: Bucket) -> datetime:
    moment = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0) if bucket == "day" else moment


def parse_dimension(value: str) -> Dimension:
    if value not in DIMENSIONS:
        raise InvalidInput(
            f"group_by {value!r} is not one of {', '.join(DIMENSIONS)}",
            hint="group usage by project, user (the key's owner), key or deployment",
        )
    return value  # type: ignore[return-value]  # checked against the Literal's values above


def parse_bucket(value: str | None) -> Bucket | None:
    """``hour`` or ``day``; None or "" (or ``none``): one row per group over the whole range."""
    if value in (None, "", "none"):
        return None
    if value not in BUCKETS:
        raise InvalidInput(
            f"bucket {value!r} is not one of {', '.join(BUCKETS)}",
            hint="leave it out (or pass none) for one total per group over the range",
        )
    return value  # type: ignore[return-value]  # checked against the Literal's values above


def parse_moment(value: str, *, name: str, now: datetime) -> datetime:
    """``value`` as an aware UTC datetime: ISO 8601 (a date, or a time with ``Z`` or an offset;
    without one it is UTC), ``now``, or a span before now (``30m``, ``24h``, ``7d``, ``2w``)."""
    text = value.strip()
    if text == "now":
        return now
    span = _SPAN.fullmatch(text)
    if span is not None:
        return now - timedelta(**{_SPAN_UNITS[span.group(2)]: int(span.group(1))})
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            f"{name} {value!r} is not a time",
            hint="use ISO 8601 (2026-12-01, 2026-12-01T08:00:00Z) or a span before now (30m, 24h, 7d, 2w)",
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse_range(since: str | None, until: str | None, *, bucket: Bucket | None, now: datetime) -> UsageWindow:
    """The range to report: ``until`` defaults to now, ``since`` to 7 days before ``until``;
    ``InvalidInput`` when ``since`` is not before ``until`` or the range is longer than the
    bucket allows (``MAXIMUM_RANGE``)."""
    end = parse_moment(until, name="until", now=now) if until else now
    start = parse_moment(since, name="since", now=now) if since else end - DEFAULT_RANGE
    if start >= end:
        raise InvalidInput(
            f"since ({_iso(start)}) must come before until ({_iso(end)})",
            hint="swap them, or leave until out for now",
        )
    longest = MAXIMUM_RANGE[bucket]
    if end - start > longest:
        per = f"by {bucket}" if bucket else "without a bucket"
        wider = "; use bucket=day for longer ranges" if bucket == "hour" else ""
        raise InvalidInput(
            f"the range {_iso(start)} to {_iso(end)} is {(end - start).days} days: "
            f"usage {per} covers at most {longest.days} days",
            hint=f"choose a later since or an earlier until{wider}",
        )
    return UsageWindow(since=start, until=end)


def _bucket_expression(session: Session, bucket: Bucket) -> ColumnElement[Any]:
    # The formats are inlined (not bound): PostgreSQL matches the GROUP BY to the SELECT by text.
    sqlite_format, postgresql_format = _FORMATS[bucket]
    if session.get_bind().dialect.name == "postgresql":
        utc = func.timezone(literal_column("'UTC'"), UsageRecord.at)
        return func.to_char(utc, literal_column(f"'{postgresql_format}'"))
    return func.strftime(literal_column(f"'{sqlite_format}'"), UsageRecord.at)


def _group_expression(group_by: Dimension) -> InstrumentedAttribute[str]:
    return {
        "project": Project.name,
        "user": User.username,
        "key": ApiKey.name,
        "deployment": UsageRecord.deployment_name,
    }[group_by]


def usage_report(
    session: Session,
    *,
    group_by: Dimension,
    bucket: Bucket | None,
    window: UsageWindow,
    project_ids: set[int] | None = None,
) -> UsageReport:
    """Requests and tokens by ``group_by`` (and ``bucket``) within the window; ``project_ids``:
    only requests made with those projects' keys (None: every request, those without a key too)."""
    group = _group_expression(group_by)
    # A request without a key (NO_KEY) is told apart from a key without an owner (NO_OWNER).
    has_key = literal_column("1") if group_by == "deployment" else ApiKey.id.is_not(None)
    bucket_start = literal_column("NULL") if bucket is None else _bucket_expression(session, bucket)
    grouped: list[ColumnElement[Any] | InstrumentedAttribute[str]] = (
        [group] if group_by == "deployment" else [group, has_key]
    )
    if bucket is not None:
        grouped.append(bucket_start)
    counted = select(
        group,
        has_key,
        bucket_start,
        func.count(UsageRecord.id),
        func.coalesce(func.sum(UsageRecord.prompt_tokens), 0),
        func.coalesce(func.sum(UsageRecord.completion_tokens), 0),
        func.count(UsageRecord.id).filter(UsageRecord.status_code >= 400),
        func.count(UsageRecord.id).filter(UsageRecord.usage_reported.is_(False)),
    )
    timed = select(group, has_key, bucket_start, UsageRecord.ttft_ms).where(UsageRecord.ttft_ms.is_not(None))
    ttft = _ttft_by_group(session.execute(_in_window(timed, window, project_ids)))
    rows = [
        UsageReportRow(
            group=(label := _label(name, keyed)),
            bucket_start=start,
            requests=int(requests),
            prompt_tokens=int(prompt),
            completion_tokens=int(completion),
            errors=int(errors),
            requests_without_usage=int(unreported),
            ttft_p50_ms=ttft.get((label, start), (None, None))[0],
            ttft_p90_ms=ttft.get((label, start), (None, None))[1],
        )
        for name, keyed, start, requests, prompt, completion, errors, unreported in session.execute(
            _in_window(counted, window, project_ids).group_by(*grouped)
        )
    ]
    rows.sort(key=lambda row: (row.group, row.bucket_start or ""))
    return UsageReport(
        group_by=group_by, bucket=bucket, window=window, rows=rows, ttft_ms=ttft.get(None, (None, None))
    )


def _label(name: str | None, keyed: object) -> str:
    return name if name is not None else (NO_OWNER if keyed else NO_KEY)


def _in_window(statement: Select[Any], window: UsageWindow, project_ids: set[int] | None) -> Select[Any]:
    """``statement`` over the requests of the window (and of ``project_ids``' keys), with the
    request's key, project and user joined."""
    statement = (
        statement.select_from(UsageRecord)
        .outerjoin(ApiKey, ApiKey.id == UsageRecord.api_key_id)
        .outerjoin(Project, Project.id == ApiKey.project_id)
        .outerjoin(User, User.id == ApiKey.owner_id)
        .where(UsageRecord.at >= window.since, UsageRecord.at < window.until)
    )
    if project_ids is not None:
        statement = statement.where(ApiKey.project_id.in_(project_ids))
    return statement


TtftKey = tuple[str, str | None] | None


def _ttft_by_group(timed: Any) -> dict[TtftKey, tuple[float | None, float | None]]:
    """The median and 90th percentile time to first token per (group, bucket start), and of
    every request (key None), from ``(name, keyed, bucket start, ttft_ms)`` rows."""
    values: dict[TtftKey, list[float]] = defaultdict(list)
    for name, keyed, start, ttft_ms in timed:
        values[(_label(name, keyed), start)].append(float(ttft_ms))
        values[None].append(float(ttft_ms))
    return {key: (percentile(found, 50), percentile(found, 90)) for key, found in values.items()}


def percentile(values: list[float], percent: int) -> float | None:
    """The ``percent``th percentile of ``values`` by linear interpolation between the two nearest
    ranks (PostgreSQL's ``percentile_cont``, numpy's default), rounded to 0.1 ms; None for none."""
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 1)
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return round(cuts[percent - 1], 1)
