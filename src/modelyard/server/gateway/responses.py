"""Relaying an engine's answer to the client, and noticing when the client leaves.

``ClientWatchedResponse`` runs an exchange with an engine (connect, wait, relay) as the response
of the client's request, and cancels it the moment the client disconnects, whatever it is
waiting for: a connection, the first byte of a long non-streamed answer, the next event. The
exchange then closes its connection to the engine, which real engines take as an abort.

``relay_stream`` sends each piece of an SSE stream as soon as it is read (through ``SseRelay``);
``relay_body`` sends a whole answer once the engine has finished it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from modelyard.server.gateway.bodies import normalise_error_body, normalise_success_body
from modelyard.server.gateway.errors import error_json_bytes
from modelyard.server.gateway.model_names import ModelNameRewrite
from modelyard.server.gateway.runtime import ENGINE_CONNECTION_ERRORS
from modelyard.server.gateway.streaming import SseRelay
from modelyard.server.gateway.usage import TokenUsage

logger = logging.getLogger(__name__)

# nginx's "client closed request": recorded in usage_records, never sent.
CLIENT_CLOSED_REQUEST = 499
ENGINE_BROKE_OFF = 502

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class ClientWatch:
    """Cancels the response's task when the client disconnects, until ``finishing()``."""

    def __init__(self, receive: Receive, task: asyncio.Task[object]) -> None:
        self.client_gone = False
        # Called once, with the status and usage, just before the answer's last bytes are sent:
        # the proxy records the request there (the usage journal), so an answered request is on
        # disk before the client has all of its answer.
        self.on_finishing: Callable[[int, TokenUsage | None], None] | None = None
        self.recorded = False
        self._finishing = False
        self._task = task
        self._watcher = asyncio.ensure_future(self._watch(receive))

    def finishing(self, status: int | None = None, usage: TokenUsage | None = None) -> None:
        """The last bytes are about to be sent: a disconnect from now on changes nothing."""
        self._finishing = True
        if status is not None and self.on_finishing is not None and not self.recorded:
            self.recorded = True
            self.on_finishing(status, usage)

    def stop(self) -> None:
        self._finishing = True
        self._watcher.cancel()

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not self._finishing:
                    self.client_gone = True
                    self._task.cancel()
                return


Exchange = Callable[[Send, ClientWatch], Awaitable[None]]


class ClientWatchedResponse(Response):
    """An ASGI response that runs ``exchange(send, watch)``; a client disconnect cancels it.

    The exchange sees the disconnect as ``asyncio.CancelledError`` (and cleans up in ``finally``);
    the response then ends quietly.
    """

    def __init__(self, exchange: Exchange) -> None:
        self.status_code = 200
        self.background = None
        self.raw_headers = []
        self._exchange = exchange

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        watch = ClientWatch(receive, task)
        try:
            await self._exchange(send, watch)
        except asyncio.CancelledError:
            if not watch.client_gone:
                raise
            task.uncancel()
        except OSError:
            # Servers other than uvicorn report a vanished client by failing send().
            pass
        finally:
            watch.stop()


@dataclass
class RelayOutcome:
    """How a relay ended: the status to record, the usage the engine reported."""

    status: int
    usage: TokenUsage | None
    # The engine's answer was read to its end: the connection can go back to the pool.
    engine_done: bool


async def send_whole(
    send: Send,
    watch: ClientWatch,
    status: int,
    body: bytes,
    content_type: str,
    usage: TokenUsage | None = None,
) -> None:
    watch.finishing(status, usage)
    headers = [
        (b"content-type", content_type.encode("latin-1")),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def relay_stream(
    upstream: aiohttp.ClientResponse, relay: SseRelay, send: Send, watch: ClientWatch, description: str
) -> RelayOutcome:
    """Send every event as it arrives; always end with ``data: [DONE]``.

    ``description`` names the engine in log lines and in the client's error event
    (``deployment 'demo' (instance 3)``); it never contains request content.
    """
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
    engine_done = False
    try:
        async for chunk in upstream.content.iter_any():
            out = relay.feed(chunk)
            if relay.saw_done:
                watch.finishing(200, relay.usage)  # [DONE] ends the answer for the client
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
    except ENGINE_CONNECTION_ERRORS as error:
        logger.warning(
            "the engine serving %s broke its stream (%s: %s); the client gets an error event",
            description,
            type(error).__name__,
            error,
        )
        tail = relay.cut(f"the engine serving {description} stopped in the middle of the answer")
    else:
        engine_done = True
        tail = relay.end()
        if relay.interrupted:
            logger.warning(
                "the engine serving %s ended its stream before the answer finished; "
                "the client gets an error event",
                description,
            )
    status = ENGINE_BROKE_OFF if relay.interrupted else 200
    watch.finishing(status, relay.usage)
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    return RelayOutcome(status=status, usage=relay.usage, engine_done=engine_done)


async def relay_body(
    upstream: aiohttp.ClientResponse,
    model_rewrite: ModelNameRewrite | None,
    send: Send,
    watch: ClientWatch,
    description: str,
) -> RelayOutcome:
    """Send a whole answer (model name and reasoning normalised) or the engine's error."""
    try:
        body = await upstream.read()
    except ENGINE_CONNECTION_ERRORS as error:
        logger.warning(
            "the engine serving %s dropped the connection before its answer was complete (%s: %s)",
            description,
            type(error).__name__,
            error,
        )
        message = (
            f"the engine serving {description} closed the connection before its answer was complete "
            f"({type(error).__name__})"
        )
        body = error_json_bytes(message, status=ENGINE_BROKE_OFF, code="engine_unreachable")
        await send_whole(send, watch, ENGINE_BROKE_OFF, body, "application/json")
        return RelayOutcome(status=ENGINE_BROKE_OFF, usage=None, engine_done=False)
    status = upstream.status
    usage = None
    if status == 200:
        body, usage = normalise_success_body(body, model_rewrite)
        content_type = upstream.headers.get("Content-Type", "application/json")
    else:
        body = normalise_error_body(body, status)
        content_type = "application/json"
    await send_whole(send, watch, status, body, content_type, usage)
    return RelayOutcome(status=status, usage=usage, engine_done=True)
