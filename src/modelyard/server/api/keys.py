"""``/api/v1/keys``: gateway API keys. POST returns the key once; it is never shown again.

A key belongs to a project and to the user who made it. Admins and operators see and change
every key; a member sees their projects' keys and makes, rotates and revokes only their own.
Every write is recorded in the audit log (never the key itself).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from modelyard.errors import Forbidden, NotFound
from modelyard.server.api.auditing import AuditEntry, in_audited_session
from modelyard.server.api.common import in_session
from modelyard.server.auth import SignedIn
from modelyard.server.context import ServerContext, server_context
from modelyard.server.gateway.limit_counters import SlidingCounters, current_use
from modelyard.server.policy import authorize
from modelyard.services import keys, projects
from modelyard.services.names import MAXIMUM_NAME_LENGTH
from modelyard.services.roles import sees_every_project
from modelyard.store.tables import ApiKey

router = APIRouter(tags=["keys"])

# The columns are 32-bit integers.
MAXIMUM_PER_MINUTE = 2**31 - 1


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=MAXIMUM_NAME_LENGTH)
    # None: every deployment.
    allowed_deployments: (
        Annotated[list[Annotated[str, Field(max_length=MAXIMUM_NAME_LENGTH)]], Field(max_length=1024)] | None
    ) = None
    # Limits (None: none), enforced by the gateway (429 with Retry-After, OpenAI-shaped).
    requests_per_minute: int | None = Field(default=None, ge=1, le=MAXIMUM_PER_MINUTE)
    tokens_per_minute: int | None = Field(default=None, ge=1, le=MAXIMUM_PER_MINUTE)
    max_concurrent_requests: int | None = Field(default=None, ge=1, le=100_000)
    token_quota: int | None = Field(default=None, ge=1, le=10**15)
    quota_period: Literal["day", "month"] | None = None
    # None: "default" for admins and operators, a member's only project.
    project: str | None = Field(default=None, max_length=64)


def _shown(session: Session, record: ApiKey) -> dict[str, Any]:
    """The key as the API shows it: the service's view, its project and its owner."""
    owner = record.owner.username if record.owner is not None else None
    return {**keys.key_to_json(record), "project": record.project.name, "owner": owner}


def _visible_keys(session: Session, user: SignedIn) -> list[ApiKey]:
    visible = projects.visible_project_ids(session, user.id, user.role)
    return [record for record in keys.list_keys(session) if visible is None or record.project_id in visible]


def _changeable(session: Session, name: str, user: SignedIn) -> ApiKey:
    """Key ``name`` when ``user`` may rotate or revoke it: any key for admins and operators, a
    member's own (``Forbidden`` for a project's other keys, ``NotFound`` outside their projects)."""
    record = keys.get_key(session, name)
    if sees_every_project(user.role):
        return record
    visible = projects.visible_project_ids(session, user.id, user.role) or set()
    if record.project_id not in visible:
        raise NotFound(f"no key named {name!r} in your projects", hint="GET /api/v1/keys lists yours")
    if record.owner_id != user.id:
        raise Forbidden(
            f"key {name!r} belongs to another user of project {record.project.name!r}",
            hint="a member rotates and revokes only the keys they made; ask its owner or an operator",
        )
    return record


def _create(
    session: Session, request: KeyCreate, limits: keys.KeyLimitRequest, user: SignedIn
) -> tuple[str, dict[str, Any]]:
    visible = projects.visible_project_ids(session, user.id, user.role)
    project = projects.project_for_new_object(session, request.project, visible)
    created = keys.create_key(
        session,
        request.name,
        request.allowed_deployments,
        limits,
        project,
        sees_every_project=visible is None,
    )
    created.record.owner_id = user.id
    session.commit()
    session.refresh(created.record)
    return created.key, _shown(session, created.record)


def _rotate(session: Session, name: str, user: SignedIn) -> tuple[str, dict[str, Any]]:
    _changeable(session, name, user)
    rotated = keys.rotate_key(session, name)
    return rotated.key, _shown(session, rotated.record)


def _revoke(session: Session, name: str, user: SignedIn) -> dict[str, Any]:
    _changeable(session, name, user)
    return _shown(session, keys.revoke_key(session, name))


@router.get("/keys")
async def list_keys(
    context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> list[dict[str, Any]]:
    """Every key the user sees; a key with limits also has ``use``: its sliding minute's requests
    and tokens, its requests running (every gateway worker together) and its quota's tokens used
    this period."""
    records = await in_session(context, _visible_keys, user)
    quota_used = await in_session(context, keys.quota_use, records, datetime.now(UTC))
    listed = [{**keys.key_to_json(record), "project": record.project.name} for record in records]
    gateway = context.gateway
    counters = SlidingCounters.for_keys(gateway.shared_counters()) if gateway is not None else None
    now = time.time()
    for record, shown in zip(records, listed, strict=True):
        if not any(value is not None for value in shown["limits"].values()):
            continue
        counted = counters is not None and record.revoked_at is None
        live = current_use(counters, record.id, now) if counters is not None and counted else {}
        shown["use"] = {**live, "quota_used_tokens": quota_used.get(record.id)}
    return listed


@router.post("/keys", status_code=201)
async def create_key(
    request: KeyCreate, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> dict[str, Any]:
    limits = keys.KeyLimitRequest(
        requests_per_minute=request.requests_per_minute,
        tokens_per_minute=request.tokens_per_minute,
        max_concurrent_requests=request.max_concurrent_requests,
        token_quota=request.token_quota,
        quota_period=request.quota_period,
    )

    def audited(created: tuple[str, dict[str, Any]]) -> list[AuditEntry]:
        shown = created[1]
        details = {"allowed_deployments": shown["allowed_deployments"], "limits": shown["limits"]}
        return [AuditEntry("create", "key", request.name, shown["project"], details)]

    key, shown = await in_audited_session(
        context, user, _create, request, limits, user, audit_entries=audited, drops_key_cache=True
    )
    return {**shown, "key": key}


@router.post("/keys/{name:path}/rotate")
async def rotate_key(
    name: str, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> dict[str, Any]:
    """A new secret for the key (returned once); the old secret is refused from now on."""
    key, shown = await in_audited_session(
        context,
        user,
        _rotate,
        name,
        user,
        audit_entries=lambda rotated: [
            AuditEntry("rotate", "key", name, rotated[1]["project"], {"prefix": rotated[1]["prefix"]})
        ],
        drops_key_cache=True,
    )
    return {**shown, "key": key}


@router.delete("/keys/{name:path}")
async def revoke_key(
    name: str, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> dict[str, Any]:
    return await in_audited_session(
        context,
        user,
        _revoke,
        name,
        user,
        audit_entries=lambda revoked: [AuditEntry("revoke", "key", name, revoked["project"])],
        drops_key_cache=True,
    )
