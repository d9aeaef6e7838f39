"""Recording a REST change in the audit log (``services/audit.py``), by the signed-in user."""

from __future__ import annotations

from typing import Any

from modelyard.server.api.common import in_session
from modelyard.server.auth import SignedIn
from modelyard.server.context import ServerContext
from modelyard.services import audit


async def audit_event(
    context: ServerContext,
    user: SignedIn,
    action: str,
    object_type: audit.ObjectType,
    object_name: str,
    project: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Record that ``user`` did ``action`` to ``object_type`` ``object_name`` (just now, after the
    change was committed; ``details`` lose their secrets in ``audit.scrubbed``)."""
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
