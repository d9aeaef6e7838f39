"""Gateway traffic over time: requests and tokens per time bucket, for the console's dashboard.

Usage::

    timeline = usage_timeline(session, now=utc_now(), minutes=15, bucket_seconds=30)
    timeline.buckets[-1].tokens_per_second
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from modelyard.errors import InvalidInput
from modelyard.store.tables import ApiKey, UsageRecord

MAXIMUM_BUCKETS = 120
MAXIMUM_MINUTES = 24 * 60


@dataclass(frozen=True)
class UsageBucket:
    start: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    errors: int
    tokens_per_second: float
    """Output (completion) tokens per second over the bucket."""


@dataclass(frozen=True)
class UsageTimeline:
    since: str
    bucket_seconds: int
    buckets: list[UsageBucket] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "bucket_seconds": self.bucket_seconds,
            "requests": sum(bucket.requests for bucket in self.buckets),
            "prompt_tokens": sum(bucket.prompt_tokens for bucket in self.buckets),
            "completion_tokens": sum(bucket.completion_tokens for bucket in self.buckets),
            "errors": sum(bucket.errors for bucket in self.buckets),
            "buckets": [asdict(bucket) for bucket in self.buckets],
        }


def _of_projects(project_ids: set[int] | None) -> list[ColumnElement[bool]]:
    if project_ids is None:
        return []
    return [UsageRecord.api_key_id.in_(select(ApiKey.id).where(ApiKey.project_id.in_(project_ids)))]


def usage_timeline(
    session: Session, *, now: datetime, minutes: int, bucket_seconds: int, project_ids: set[int] | None = None
) -> UsageTimeline:
    """The last ``minutes`` in buckets of ``bucket_seconds``, oldest first (the last one ends now);
    ``project_ids``: only requests made with those projects' keys (None: every request)."""
    if not 1 <= minutes <= MAXIMUM_MINUTES:
        raise InvalidInput(f"minutes must be between 1 and {MAXIMUM_MINUTES}, got {minutes}")
    if bucket_seconds < 1 or minutes * 60 / bucket_seconds > MAXIMUM_BUCKETS:
        raise InvalidInput(
            f"{minutes} minutes in buckets of {bucket_seconds} s is more than {MAXIMUM_BUCKETS} buckets",
            hint=f"use buckets of at least {-(-minutes * 60 // MAXIMUM_BUCKETS)} s",
        )
    count = -(-minutes * 60 // bucket_seconds)
    since = now - timedelta(seconds=count * bucket_seconds)
    buckets = []
    for index in range(count):
        start = since + timedelta(seconds=index * bucket_seconds)
        end = start + timedelta(seconds=bucket_seconds)
        requests, prompt, completion, errors = session.execute(
            select(
                func.count(UsageRecord.id),
                func.coalesce(func.sum(UsageRecord.prompt_tokens), 0),
                func.coalesce(func.sum(UsageRecord.completion_tokens), 0),
                func.count(UsageRecord.id).filter(UsageRecord.status_code >= 400),
            ).where(UsageRecord.at >= start, UsageRecord.at < end, *_of_projects(project_ids))
        ).one()
        buckets.append(
            UsageBucket(
                start=start.isoformat(),
                requests=int(requests),
                prompt_tokens=int(prompt),
                completion_tokens=int(completion),
                errors=int(errors),
                tokens_per_second=int(completion) / bucket_seconds,
            )
        )
    return UsageTimeline(since=since.isoformat(), bucket_seconds=bucket_seconds, buckets=buckets)
