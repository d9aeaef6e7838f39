"""Token usage metered by the gateway, summed by key and deployment.

Usage::

    rows = usage_by_key_and_deployment(session, since=datetime(2026, 1, 1, tzinfo=UTC))
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from modelyard.errors import InvalidInput
from modelyard.store.tables import ApiKey, UsageRecord


@dataclass(frozen=True)
class UsageRow:
    key: str | None  # None: requests without a key (or from a key since deleted)
    deployment: str
    requests: int
    requests_without_usage: int
    prompt_tokens: int
    completion_tokens: int
    errors: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "total_tokens": self.total_tokens}


def usage_by_key_and_deployment(
    session: Session,
    since: datetime | None = None,
    until: datetime | None = None,
    project_ids: set[int] | None = None,
) -> list[UsageRow]:
    """Usage by key and deployment within ``[since, until)``; ``project_ids``: only requests made
    with those projects' keys (None: every request, those without a key included)."""
    if since is not None and until is not None and until <= since:
        raise InvalidInput(f"'until' ({until.isoformat()}) must come after 'since' ({since.isoformat()})")
    statement = (
        select(
            ApiKey.name,
            UsageRecord.deployment_name,
            func.count(UsageRecord.id),
            func.sum(func.coalesce(UsageRecord.prompt_tokens, 0)),
            func.sum(func.coalesce(UsageRecord.completion_tokens, 0)),
            func.count(UsageRecord.id).filter(UsageRecord.usage_reported.is_(False)),
            func.count(UsageRecord.id).filter(UsageRecord.status_code >= 400),
        )
        .select_from(UsageRecord)
        .outerjoin(ApiKey, ApiKey.id == UsageRecord.api_key_id)
        .group_by(ApiKey.name, UsageRecord.deployment_name)
        .order_by(ApiKey.name, UsageRecord.deployment_name)
    )
    if since is not None:
        statement = statement.where(UsageRecord.at >= since)
    if until is not None:
        statement = statement.where(UsageRecord.at < until)
    if project_ids is not None:
        statement = statement.where(ApiKey.project_id.in_(project_ids))
    return [
        UsageRow(
            key=key,
            deployment=deployment,
            requests=int(requests),
            prompt_tokens=int(prompt or 0),
            completion_tokens=int(completion or 0),
            requests_without_usage=int(unreported),
            errors=int(errors),
        )
        for key, deployment, requests, prompt, completion, unreported, errors in session.execute(statement)
    ]
