"""Scale to zero at the gateway: a request for a deployment with no ready replica, held while the
autoscaler starts one, and sent on as soon as it is in rotation.

A deployment with ``autoscale.min: 0`` has a ``HoldPolicy`` in the registry (set by the
autoscaler, sent to every worker with the endpoint snapshot). A request for it that finds no
ready replica:

1. is counted in the shared ``deployment_held`` table (every worker's row summed): past
   ``max_held_requests`` it is refused at once, 503 ``scaled_to_zero`` with ``Retry-After``;
2. asks for a replica (``runtime.on_wanted``: ``ReplicaWanted`` to the main process from a
   worker, the autoscaler's ``wake`` in the main process), again every ``WAKE_AGAIN_S``;
3. waits for the registry to change (a new snapshot from the main process), and goes on with the
   replicas once there are some; after ``max_hold_s`` it is answered 503 ``scaled_to_zero``.

A deployment removed meanwhile is answered 404 (its name is gone); one stopped, or no longer
scaled to zero, 503 ``no_ready_replica``. A client that hangs up while held gives its place back
at once (``receive`` says ``http.disconnect``; the request ends as a 499). Nothing is read from
the database.

Usage (``access.ready_endpoints``)::

    endpoints = await hold_for_replica(runtime, "chat", hold, request_id)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from starlette.types import Receive

from modelyard.control.endpoints import Endpoint, EndpointRegistry, HoldPolicy
from modelyard.server.gateway.errors import ClientLeftWhileHeld, ModelNotFound, NoReadyReplica, ScaledToZero

if TYPE_CHECKING:
    from modelyard.server.gateway.runtime import GatewayRuntime

logger = logging.getLogger(__name__)

# What a refused held request is told to wait before it tries again.
SCALED_TO_ZERO_RETRY_AFTER_SECONDS = 5
# A held request asks for a replica again this often (a wake lost with a restarting main process).
WAKE_AGAIN_S = 5.0
HELD_TABLE = "deployment_held"


class RegistryChanges:
    """Wakes every waiter at the registry's next change (a publish in the main process, a
    snapshot loaded in a worker)."""

    def __init__(self, registry: EndpointRegistry) -> None:
        self._changed = asyncio.Event()
        registry.subscribe(self._on_change)

    def _on_change(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def next_change(self) -> None:
        await self._changed.wait()


def _starting(model: str) -> str:
    return f"deployment {model!r} is scaled to zero and starting a replica"


async def _client_gone(receive: Receive) -> None:
    """Returns when the client hangs up (call once the body was read whole)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def hold_for_replica(
    runtime: GatewayRuntime, model: str, hold: HoldPolicy, request_id: str, receive: Receive | None = None
) -> tuple[Endpoint, ...]:
    """The ready replicas of ``model`` once there are some; ``ScaledToZero`` past the bounds,
    ``ClientLeftWhileHeld`` when the client hangs up first (``receive``: the request's)."""
    table = runtime.shared.table(HELD_TABLE)
    column = hold.deployment_id % table.columns
    # Counted first, then checked: two workers admitting at once both see both counts, so the
    # bound is never passed (at worst one of them is refused though a place was left).
    table.add(column, 1)
    held = table.total(column)
    if held > hold.max_held_requests:
        table.add(column, -1)
        raise ScaledToZero(
            f"{_starting(model)}; {held - 1} request(s) are held for it already, the most it holds "
            f"(autoscale.max_held_requests {hold.max_held_requests})",
            hint=f"retry in {SCALED_TO_ZERO_RETRY_AFTER_SECONDS} s, or raise autoscale.max_held_requests",
            retry_after_seconds=SCALED_TO_ZERO_RETRY_AFTER_SECONDS,
        )
    registry = runtime.registry
    loop = asyncio.get_running_loop()
    started_s = loop.time()
    deadline_s = started_s + hold.max_hold_s
    gone = asyncio.ensure_future(_client_gone(receive)) if receive is not None else None
    try:
        while True:
            runtime.on_wanted(model)
            wake_at_s = min(deadline_s, loop.time() + WAKE_AGAIN_S)
            while not (endpoints := registry.endpoints_for(model)):
                if not registry.is_known(model):
                    raise ModelNotFound(
                        f"model {model!r} does not exist (it was removed while the request waited)",
                        hint="GET /v1/models lists the deployments",
                    )
                if registry.hold_for(model) is None:
                    raise NoReadyReplica(
                        f"deployment {model!r} has no ready replica and is no longer scaled to zero "
                        "(stopped, or its autoscale changed)",
                        hint=f"see why with `modelyard ps {model}`",
                    )
                left_s = wake_at_s - loop.time()
                if left_s <= 0:
                    break
                await _next_change_or_gone(runtime, gone, left_s)
                if gone is not None and gone.done():
                    raise ClientLeftWhileHeld(
                        f"the client left after {loop.time() - started_s:.1f} s, while its request "
                        f"waited for a replica of {model!r} (scaled to zero)"
                    )
            else:
                logger.info(
                    "request %s: held %.2f s for a replica of %r (scaled to zero)",
                    request_id,
                    loop.time() - started_s,
                    model,
                )
                return endpoints
            if loop.time() >= deadline_s:
                raise ScaledToZero(
                    f"{_starting(model)}; this request was held {hold.max_hold_s:g} s "
                    "(autoscale.max_hold_s) and none is ready yet",
                    hint=f"retry in {SCALED_TO_ZERO_RETRY_AFTER_SECONDS} s; `modelyard ps {model}` "
                    "shows the replica starting",
                    retry_after_seconds=SCALED_TO_ZERO_RETRY_AFTER_SECONDS,
                )
    finally:
        table.add(column, -1)
        if gone is not None:
            gone.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gone


async def _next_change_or_gone(
    runtime: GatewayRuntime, gone: asyncio.Future[None] | None, left_s: float
) -> None:
    """Until the registry changes, the client hangs up, or ``left_s`` passed."""
    change = asyncio.ensure_future(runtime.registry_changes.next_change())
    waiting: set[asyncio.Future[None]] = {change} if gone is None else {change, gone}
    try:
        await asyncio.wait(waiting, timeout=left_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        change.cancel()
