"""``/api/v1/sessions``: the console's signed-in browsers; an admin ends one, or all of a user's.

The token is never shown (only its digest is stored); a revoked session's next request is
answered ``401 session_expired`` by whichever process reads it, since every check reads the row.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from modelyard.errors import NotFound
from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.server.sessions import store_of
from modelyard.services import users

router = APIRouter(tags=["sessions"])


async def _user_id(context: ServerContext, username: str) -> int:
    user = await in_session(context, users.get_user, username)
    return user.id


@router.get("/sessions")
async def list_sessions(
    request: Request,
    username: str | None = Query(default=None, max_length=64),
    context: ServerContext = Depends(server_context),
) -> list[dict[str, Any]]:
    """The sessions that have not expired, most recently used first; ``?username=`` for one user's."""
    user_id = await _user_id(context, username) if username is not None else None
    store = store_of(request, context)
    live = await run_in_threadpool(store.live_sessions, user_id)
    return [session.to_json() for session in live]


@router.delete("/sessions/{session_id}", status_code=204)
async def revoke_session(
    request: Request, session_id: int, context: ServerContext = Depends(server_context)
) -> Response:
    """End one session: its next request must sign in again."""
    if not 1 <= session_id < 2**63:
        raise NotFound(f"there is no session {session_id}", hint="GET /api/v1/sessions lists them")
    store = store_of(request, context)
    if not await run_in_threadpool(store.revoke, session_id):
        raise NotFound(f"there is no session {session_id}", hint="GET /api/v1/sessions lists them")
    return Response(status_code=204)


@router.delete("/sessions")
async def revoke_user_sessions(
    request: Request,
    username: str = Query(max_length=64),
    context: ServerContext = Depends(server_context),
) -> dict[str, int]:
    """End every session of ``?username=`` (signed in with a password or a provider)."""
    user_id = await _user_id(context, username)
    store = store_of(request, context)
    return {"revoked": await run_in_threadpool(store.revoke_user, user_id)}
