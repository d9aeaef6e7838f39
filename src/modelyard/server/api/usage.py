"""``GET /api/v1/usage``: tokens by key and deployment, optionally within ``[since, until)``; a
member sees the requests made with their projects' keys."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from modelyard.server.api.common import in_session
from modelyard.server.auth import SignedIn
from modelyard.server.context import ServerContext, server_context
from modelyard.server.policy import authorize
from modelyard.services import usage
from modelyard.services.projects import visible_project_ids

router = APIRouter(tags=["usage"])


def _aware(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


def _usage(
    session: Session, since: datetime | None, until: datetime | None, user: SignedIn
) -> dict[str, Any]:
    visible = visible_project_ids(session, user.id, user.role)
    rows = usage.usage_by_key_and_deployment(session, since, until, visible)
    return {
        "since": since.isoformat() if since else None,
        "until": until.isoformat() if until else None,
        "rows": [row.to_json() for row in rows],
        "total_tokens": sum(row.total_tokens for row in rows),
        "requests": sum(row.requests for row in rows),
    }


@router.get("/usage")
async def read_usage(
    since: datetime | None = None,
    until: datetime | None = None,
    context: ServerContext = Depends(server_context),
    user: SignedIn = Depends(authorize),
) -> dict[str, Any]:
    """Tokens by key and deployment; a member's projects' keys only."""
    return await in_session(context, _usage, _aware(since), _aware(until), user)
