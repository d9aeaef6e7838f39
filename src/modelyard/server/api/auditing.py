"""Recording a REST change in the audit log (``services/audit.py``), by the signed-in user, in the
same database transaction as the change: no change without its row, no row without the change.

The change runs in a session whose ``commit()`` only flushes (``_CommitHeld``), so the services
keep committing as they always did; once the change has returned, its rows (``AuditEntry``, made
from its result) are added and everything commits at once. A change that raises, or an audit row
that cannot be written, rolls back both.

A change that the gateway's key cache depends on (keys, projects, their members and quotas)
passes ``drops_key_cache=True``: the cache of every gateway worker is dropped once it is committed.

Usage::

    result = await in_audited_session(
        context, user, _set_state, name, "stopped",
        audit_entries=lambda result: [AuditEntry("stop", "deployment", name, result.get("project"))],
    )
    await in_audited_session(
        context, user, projects.delete_project, name,
        audit_entries=AuditEntry("delete", "project", name, name), drops_key_cache=True,
    )
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from modelyard.server.api.common import in_session
from modelyard.server.auth import SignedIn
from modelyard.server.context import ServerContext
from modelyard.services import audit

Result = TypeVar("Result")


@dataclass(frozen=True)
class AuditEntry:
    """One row of the audit log, as a route describes its change (the actor is the signed-in user)."""

    action: str
    object_type: audit.ObjectType
    object_name: str
    project: str | None = None
    details: dict[str, Any] | None = field(default=None)


class _CommitHeld(Session):
    """A session whose ``commit()`` flushes only: the caller commits once, with the audit rows."""

    def commit(self) -> None:
        self.flush()

    def commit_with_audit(self) -> None:
        super().commit()


async def in_audited_session(
    context: ServerContext,
    user: SignedIn,
    use_case: Callable[..., Result],
    *args: Any,
    audit_entries: AuditEntry | Callable[[Result], Sequence[AuditEntry]],
    drops_key_cache: bool = False,
    **kwargs: Any,
) -> Result:
    """Run ``use_case(session, *args, **kwargs)`` (in a worker thread) and record ``audit_entries``
    (one entry, or the entries made from the result) in the same transaction; return the result
    once both are committed, after dropping the gateway's key cache when ``drops_key_cache``."""

    def entries(result: Result) -> Sequence[AuditEntry]:
        return [audit_entries] if isinstance(audit_entries, AuditEntry) else audit_entries(result)

    def run() -> Result:
        with _CommitHeld(bind=context.database.engine, expire_on_commit=False) as session:
            result = use_case(session, *args, **kwargs)
            for entry in entries(result):
                _record(session, user, entry)
            session.commit_with_audit()
            return result

    result = await run_in_threadpool(run)
    if drops_key_cache:
        context.key_cache.invalidate()
    return result


def _record(session: Session, user: SignedIn, entry: AuditEntry) -> None:
    audit.record(
        session,
        actor=user.username,
        action=entry.action,
        object_type=entry.object_type,
        object_name=entry.object_name,
        project=entry.project,
        details=entry.details,
    )


async def audit_event(
    context: ServerContext,
    user: SignedIn,
    action: str,
    object_type: audit.ObjectType,
    object_name: str,
    project: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Record, on its own, that ``user`` did ``action`` (for what changes nothing stored itself,
    such as ending sessions elsewhere; a stored change uses ``in_audited_session``)."""
    await in_session(
        context,
        audit.record_committed,
        actor=user.username,
        action=action,
        object_type=object_type,
        object_name=object_name,
        project=project,
        details=details,
    )
