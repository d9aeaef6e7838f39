"""``GET /api/v1/deployments/{name}/logs``: an engine's log, as text, streamed when following;
``GET /api/v1/deployments/{name}/logs/starts``: the starts of an instance that have a log.

``instance`` picks the instance (default: the first replica), ``start`` one start by its number
(1 is the first), ``previous`` the start before the current one, ``tail`` the number of last lines
(default all), ``follow`` keeps the response open and sends lines as they are written, across
engine restarts, until the client goes away or the instance is gone (only for the current start:
an earlier start's log is complete).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.errors import InvalidInput, NotFound
from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services import deployments, instances
from modelyard.store.tables import Instance

router = APIRouter(tags=["deployments"])

FOLLOW_POLL_SECONDS = 0.3
# How often (in polls) a follower checks that its instance still exists and which file is current.
INSTANCE_CHECK_EVERY_POLLS = 3
READ_CHUNK_BYTES = 65536
MAXIMUM_TAIL_LINES = 1_000_000


MAXIMUM_START_NUMBER = 2**31


def _resolve(
    session: Session, name: str, instance_id: int | None, previous: bool, start: int | None
) -> tuple[int, Path, bool]:
    """The instance, the log file asked for, and whether it is the current start's."""
    deployment = deployments.get_deployment(session, name)
    instance = instances.choose_instance(deployment, instance_id)
    path = instances.log_file(instance, previous, start)
    return instance.id, path, str(path) == instance.log_path


def _starts(session: Session, name: str, instance_id: int | None) -> dict[str, Any]:
    deployment = deployments.get_deployment(session, name)
    instance = instances.choose_instance(deployment, instance_id)
    return {
        "deployment": deployment.name,
        "instance": instance.id,
        "instance_uid": instance.uid,
        "current_start": instances.current_start_number(instance),
        "starts": [start.to_json() for start in instances.start_logs(instance)],
    }


def _current_log_path(session: Session, instance_id: int) -> str | None:
    """The instance's current log file; an empty string when the instance no longer exists."""
    row = session.execute(select(Instance.log_path).where(Instance.id == instance_id)).first()
    return "" if row is None else row[0]


async def _follow(
    request: Request, context: ServerContext, instance_id: int, path: Path, offset: int
) -> AsyncIterator[bytes]:
    polls = 0
    while not await request.is_disconnected():
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size < offset:  # truncated: start over
            offset = 0
        if size > offset:
            with path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read(min(size - offset, READ_CHUNK_BYTES))
            offset += len(chunk)
            yield chunk
            continue
        polls += 1
        if polls % INSTANCE_CHECK_EVERY_POLLS == 0:
            current = await in_session(context, _current_log_path, instance_id)
            if current == "":
                return
            if current and Path(current) != path:
                path, offset = Path(current), 0  # the engine restarted: follow its new log
                yield f"--- engine restarted, now {path.name} ---\n".encode()
                continue
        await asyncio.sleep(FOLLOW_POLL_SECONDS)


@router.get("/deployments/{name:path}/logs/starts")
async def list_log_starts(
    name: str,
    instance: int | None = Query(
        default=None, ge=1, le=2**53, description="instance id (default: the first replica)"
    ),
    context: ServerContext = Depends(server_context),
) -> dict[str, Any]:
    """The starts of an instance that left a log (``start-<n>.log``), oldest first; read one
    with ``/logs?start=N``."""
    return await in_session(context, _starts, name, instance)


@router.get("/deployments/{name:path}/logs")
async def read_logs(
    name: str,
    request: Request,
    instance: int | None = Query(
        default=None, ge=1, le=2**53, description="instance id (default: the first replica)"
    ),
    previous: bool = Query(default=False, description="the log of the start before the current one"),
    start: int | None = Query(
        default=None, ge=1, le=MAXIMUM_START_NUMBER, description="the log of start N (see /logs/starts)"
    ),
    follow: bool = Query(default=False, description="keep streaming new lines"),
    tail: int | None = Query(default=None, ge=0, le=MAXIMUM_TAIL_LINES, description="only the last N lines"),
    context: ServerContext = Depends(server_context),
) -> StreamingResponse:
    if tail is not None and tail < 0:
        raise InvalidInput(f"tail must be 0 or more, got {tail}")
    instance_id, path, current = await in_session(context, _resolve, name, instance, previous, start)
    if not path.is_file() and (not current or not follow):
        raise NotFound(f"log file {path} does not exist", hint="the engine may not have written it yet")
    data, offset = instances.read_tail(path, tail) if path.is_file() else (b"", 0)

    async def stream() -> AsyncIterator[bytes]:
        yield data
        if follow and current:
            async for chunk in _follow(request, context, instance_id, path, offset):
                yield chunk

    return StreamingResponse(stream(), media_type="text/plain; charset=utf-8")
