"""What every REST module shares: running a service call off the event loop, in one session."""

from __future__ import annotations

from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from modelyard.server.context import ServerContext

Parameters = ParamSpec("Parameters")
Result = TypeVar("Result")


async def in_session(
    context: ServerContext,
    use_case: Callable[Concatenate[Session, Parameters], Result],
    *args: Parameters.args,
    **kwargs: Parameters.kwargs,
) -> Result:
    """Run ``use_case(session, *args, **kwargs)`` in a worker thread with a fresh session.

    Database calls are blocking; running them in a thread keeps the gateway's streams flowing.
    The session closes (rolling back anything uncommitted) when the use case returns or raises.
    """

    def run() -> Result:
        with context.database.session() as session:
            return use_case(session, *args, **kwargs)

    return await run_in_threadpool(run)
