"""The ASGI response that relays an engine's stream to the client as each piece arrives.

Each chunk read from the engine goes through ``SseRelay.feed`` and is sent at once; nothing
waits for the whole answer. When the client disconnects, the relay stops and the connection to
the engine is closed, so the engine stops generating. ``on_finish`` is called exactly once with
the status the request ends with (200; 502 when the engine cut the stream; 499 when the client
went away), whatever happens.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from modelyard.server.gateway.runtime import ENGINE_CONNECTION_ERRORS
from modelyard.server.gateway.streaming import SseRelay

logger = logging.getLogger(__name__)

# nginx's "client closed request": recorded in usage_records, never sent.
CLIENT_CLOSED_REQUEST = 499
STREAM_CUT = 502

_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


class EngineStreamResponse(Response):
    """Streams ``upstream`` (an open engine response) through ``relay`` to the client.

    ``description`` names the engine in log lines and in the client's error event
    (e.g. ``deployment 'demo' instance 3``); it never contains request content.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        upstream: aiohttp.ClientResponse,
        relay: SseRelay,
        *,
        on_finish: Callable[[int], None],
        description: str,
    ) -> None:
        self.status_code = 200
        self.background = None
        self.init_headers(_SSE_HEADERS)
        self._upstream = upstream
        self._relay = relay
        self._on_finish = on_finish
        self._description = description
        self._finishing = False
        self._client_gone = False
        self._engine_done = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.ensure_future(self._watch_disconnect(receive, task))
        status = 200
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            tail = await self._relay_body(send)
            if self._relay.interrupted:
                status = STREAM_CUT
            self._finishing = True
            await send({"type": "http.response.body", "body": tail, "more_body": False})
        except asyncio.CancelledError:
            if not self._client_gone:
                raise
            task.uncancel()
            status = CLIENT_CLOSED_REQUEST
        except OSError:
            # Servers other than uvicorn report a vanished client by failing send().
            status = CLIENT_CLOSED_REQUEST
        finally:
            self._finishing = True
            watcher.cancel()
            if self._engine_done:
                self._upstream.release()  # the connection goes back to the pool
            else:
                self._upstream.close()  # the engine sees the disconnect and stops generating
            self._on_finish(status)

    async def _relay_body(self, send: Send) -> bytes:
        """Send every event as it arrives; return the last bytes to send (ends with ``[DONE]``)."""
        relay = self._relay
        try:
            async for chunk in self._upstream.content.iter_any():
                out = relay.feed(chunk)
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
        except ENGINE_CONNECTION_ERRORS as error:
            logger.warning(
                "the engine serving %s broke its stream (%s: %s); the client gets an error event",
                self._description,
                type(error).__name__,
                error,
            )
            return relay.cut(f"the engine serving {self._description} stopped in the middle of the answer")
        self._engine_done = True
        tail = relay.end()
        if relay.interrupted:
            logger.warning(
                "the engine serving %s ended its stream before the answer finished; "
                "the client gets an error event",
                self._description,
            )
        return tail

    async def _watch_disconnect(self, receive: Receive, task: asyncio.Task[object]) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not self._finishing:
                    self._client_gone = True
                    task.cancel()
                return
