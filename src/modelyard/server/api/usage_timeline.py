"""``GET /api/v1/usage/timeline?minutes=15&bucket_seconds=30``: gateway traffic per time bucket."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from modelyard.server.api.common import in_session
from modelyard.server.auth import SignedIn
from modelyard.server.context import ServerContext, server_context
from modelyard.server.policy import authorize
from modelyard.services.projects import visible_project_ids
from modelyard.services.usage_timeline import usage_timeline
from modelyard.store.tables import utc_now

router = APIRouter(tags=["usage"])


def _timeline(session: Session, minutes: int, bucket_seconds: int, user: SignedIn) -> dict[str, Any]:
    return usage_timeline(
        session,
        now=utc_now(),
        minutes=minutes,
        bucket_seconds=bucket_seconds,
        project_ids=visible_project_ids(session, user.id, user.role),
    ).to_json()


@router.get("/usage/timeline")
async def read_usage_timeline(
    minutes: int = 15,
    bucket_seconds: int = 30,
    context: ServerContext = Depends(server_context),
    user: SignedIn = Depends(authorize),
) -> dict[str, Any]:
    """Traffic per time bucket; a member's projects' keys only."""
    return await in_session(context, _timeline, minutes, bucket_seconds, user)
