"""The audit log: who did what to which object, and when.

The REST routes that change deployments, keys, users and projects record an ``AuditEvent`` in
the session of the change, committed with it (``record``, then the service's commit, or
``record_committed`` after it); a sign-in records one too. Rows are never updated or deleted by
modelyard.

No secret reaches a row: ``details`` passes through ``scrubbed``, which drops the values of
fields named like secrets (``key``, ``password``, ``token``, ...; ``modelyard.secret_names``),
keeps only the names of environment variables, and masks secret engine flags.

Usage::

    record(session, actor="alice", action="create", object_type="key", object_name="ci",
           project="research", details={"allowed_deployments": ["chat"]})
    session.commit()
    events = find_events(session, AuditFilter(actor="alice", since=yesterday))
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.errors import InvalidInput
from modelyard.secret_names import MASK, is_secret_env_name, mask_arguments
from modelyard.store.tables import AuditEvent

# The object types and actions rows carry (external API: the filters and the CLI accept them).
ObjectType = Literal["deployment", "key", "user", "project", "session"]
OBJECT_TYPES: tuple[str, ...] = ("deployment", "key", "user", "project", "session")
ACTIONS: tuple[str, ...] = (
    "create",
    "update",
    "delete",
    "start",
    "stop",
    "scale",
    "revoke",
    "rotate",
    "role",
    "join",
    "leave",
    "login",
)
MAXIMUM_EVENTS = 1000
_SECRET_FIELDS = frozenset(
    {"key", "key_hash", "password", "password_hash", "new_password", "current_password"}
)


def scrubbed(details: dict[str, Any]) -> dict[str, Any]:
    """``details`` without secrets: secret-named fields masked, env values dropped, flags masked."""
    clean: dict[str, Any] = {}
    for name, value in details.items():
        # A string under a secret's name (``hf_token``); counts such as ``token_quota`` are kept.
        if name in _SECRET_FIELDS or (isinstance(value, str) and is_secret_env_name(name)):
            clean[name] = MASK
        elif name == "env" and isinstance(value, dict):
            clean["env_names"] = sorted(str(variable) for variable in value)
        elif name == "backend_parameters" and isinstance(value, list):
            clean[name] = mask_arguments([str(argument) for argument in value])
        elif isinstance(value, dict):
            clean[name] = scrubbed(value)
        else:
            clean[name] = value
    return clean


def record(
    session: Session,
    *,
    actor: str,
    action: str,
    object_type: ObjectType,
    object_name: str,
    project: str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """Add one event to ``session`` (committed with the change it records)."""
    event = AuditEvent(
        actor=actor,
        action=action,
        object_type=object_type,
        object_name=object_name,
        project=project,
        details=scrubbed(details or {}),
    )
    session.add(event)
    return event


def record_committed(
    session: Session,
    *,
    actor: str,
    action: str,
    object_type: ObjectType,
    object_name: str,
    project: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """``record`` and commit: for a change a service has committed already in this session."""
    record(
        session,
        actor=actor,
        action=action,
        object_type=object_type,
        object_name=object_name,
        project=project,
        details=details,
    )
    session.commit()


@dataclass(frozen=True)
class AuditFilter:
    """Which events to read; None: any. ``since`` inclusive, ``until`` exclusive."""

    actor: str | None = None
    action: str | None = None
    object_type: str | None = None
    object_name: str | None = None
    project: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 200


def find_events(session: Session, wanted: AuditFilter) -> list[AuditEvent]:
    """The events that match ``wanted``, newest first, at most ``wanted.limit``."""
    if wanted.object_type is not None and wanted.object_type not in OBJECT_TYPES:
        raise InvalidInput(
            f"object type {wanted.object_type!r} is not one of {', '.join(OBJECT_TYPES)}",
            hint="leave it out to see every kind of object",
        )
    if wanted.action is not None and wanted.action not in ACTIONS:
        raise InvalidInput(f"action {wanted.action!r} is not one of {', '.join(ACTIONS)}")
    if wanted.since is not None and wanted.until is not None and wanted.until <= wanted.since:
        raise InvalidInput(
            f"'until' ({wanted.until.isoformat()}) must come after 'since' ({wanted.since.isoformat()})"
        )
    if not 1 <= wanted.limit <= MAXIMUM_EVENTS:
        raise InvalidInput(f"limit {wanted.limit} is not between 1 and {MAXIMUM_EVENTS}")
    statement = select(AuditEvent).order_by(AuditEvent.at.desc(), AuditEvent.id.desc()).limit(wanted.limit)
    for column, value in (
        (AuditEvent.actor, wanted.actor),
        (AuditEvent.action, wanted.action),
        (AuditEvent.object_type, wanted.object_type),
        (AuditEvent.object_name, wanted.object_name),
        (AuditEvent.project, wanted.project),
    ):
        if value is not None:
            statement = statement.where(column == value)
    if wanted.since is not None:
        statement = statement.where(AuditEvent.at >= wanted.since)
    if wanted.until is not None:
        statement = statement.where(AuditEvent.at < wanted.until)
    return list(session.scalars(statement))


def event_to_json(event: AuditEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "at": event.at.isoformat(),
        "actor": event.actor,
        "action": event.action,
        "object_type": event.object_type,
        "object_name": event.object_name,
        "project": event.project,
        "details": event.details,
    }
