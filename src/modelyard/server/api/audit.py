"""``GET /api/v1/audit``: who did what to which object, and when (admins and operators).

Filters: ``actor``, ``action``, ``object_type``, ``object_name``, ``project``, ``since``
(inclusive), ``until`` (exclusive), ``limit`` (newest first)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services import audit

router = APIRouter(tags=["audit"])


def _aware(moment: datetime | None) -> datetime | None:
    return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


def _events(session: Session, wanted: audit.AuditFilter) -> dict[str, Any]:
    return {"events": [audit.event_to_json(event) for event in audit.find_events(session, wanted)]}


@router.get("/audit")
async def read_audit(
    actor: str | None = Query(default=None, max_length=64),
    action: str | None = Query(default=None, max_length=32),
    object_type: str | None = Query(default=None, max_length=32),
    object_name: str | None = Query(default=None, max_length=256),
    project: str | None = Query(default=None, max_length=64),
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = Query(default=200, ge=1, le=audit.MAXIMUM_EVENTS),
    context: ServerContext = Depends(server_context),
) -> dict[str, Any]:
    wanted = audit.AuditFilter(
        actor=actor,
        action=action,
        object_type=object_type,
        object_name=object_name,
        project=project,
        since=_aware(since),
        until=_aware(until),
        limit=limit,
    )
    return await in_session(context, _events, wanted)
