"""Relaying an engine's answer to the client, and noticing when the client leaves.

``watched`` runs an exchange with an engine (connect, wait, relay) and cancels it the moment the
client disconnects, whatever it is waiting for: a connection, the first byte of a long
non-streamed answer, the next event. The exchange then closes its connection to the engine,
which real engines take as an abort.

``relay_openai_stream`` sends each piece of an OpenAI chunk stream as soon as it is read (through
``SseRelay``); ``relay_passthrough_stream`` sends any other stream unchanged, reading its usage;
``relay_body`` sends a whole answer once the engine has finished it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.types import Receive, Send

from modelyard.server.gateway.bodies import normalise_error_body, normalise_success_body
from modelyard.server.gateway.engine_client import EngineBroke, EngineResponse
from modelyard.server.gateway.errors import error_json_bytes
from modelyard.server.gateway.model_names import ModelNameRewrite
from modelyard.server.gateway.passthrough import UsageReader
from modelyard.server.gateway.streaming import SseRelay
from modelyard.server.gateway.usage import TokenUsage, usage_from_body

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
    """Cancels the request's task when the client disconnects, until ``finishing()``."""

    def __init__(self, receive: Receive, task: asyncio.Task[object]) -> None:
        self.client_gone = False
        self._task: asyncio.Task[object] | None
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
        """The exchange is over. The watcher is not cancelled: once the answer is complete,
        uvicorn's ``receive()`` returns ``http.disconnect`` and the watcher ends by itself. A
        cancelled watcher kept its CancelledError's traceback, whose frames held the whole
        request in a reference cycle: 43 objects a request for the garbage collector, about
        75 µs of CPU per request in collections (measured). Only a watcher still waiting on the
        next turn of the loop is cancelled."""
        self._finishing = True
        self._task = None
        if not self._watcher.done():
            asyncio.get_running_loop().call_soon(self._cancel_if_waiting)

    def _cancel_if_waiting(self) -> None:
        if not self._watcher.done():
            self._watcher.cancel()

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not self._finishing and self._task is not None:
                    self.client_gone = True
                    self._task.cancel()
                return


Exchange = Callable[[ClientWatch], Awaitable[None]]


async def watched(receive: Receive, exchange: Exchange) -> None:
    """Run ``exchange(watch)``; a client disconnect cancels it (it cleans up in ``finally``).

    Call after the request body was read whole: the watch takes every later ``receive()``.
    """
    task = asyncio.current_task()
    assert task is not None
    watch = ClientWatch(receive, task)
    try:
        await exchange(watch)
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
    # The gateway's own error code, when it made the answer an error (e.g. "stream_interrupted").
    code: str | None = None


@dataclass
class ClientTiming:
    """When the request arrived, and the observers of its first byte and later chunk gaps."""

    arrived_s: float
    clock: Callable[[], float]
    on_first_byte: Callable[[float], None]
    on_gap: Callable[[float], None]
    first_byte_s: float | None = None


def _with(headers: list[tuple[bytes, bytes]], extra: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return headers + extra if extra else headers


async def send_whole(
    send: Send,
    watch: ClientWatch | None,
    status: int,
    body: bytes,
    content_type: bytes,
    extra_headers: list[tuple[bytes, bytes]],
    usage: TokenUsage | None = None,
) -> None:
    if watch is not None:
        watch.finishing(status, usage)
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": _with(headers, extra_headers)})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def relay_openai_stream(
    upstream: EngineResponse,
    relay: SseRelay,
    send: Send,
    watch: ClientWatch,
    description: str,
    timing: ClientTiming,
    extra_headers: list[tuple[bytes, bytes]],
) -> RelayOutcome:
    """Send every event as it arrives; always end with ``data: [DONE]``.

    ``description`` names the request and engine in log lines and in the client's error event
    (``deployment 'demo' (instance 3)``); it never contains request content.
    """
    await send({"type": "http.response.start", "status": 200, "headers": _with(_SSE_HEADERS, extra_headers)})
    engine_done = False
    clock = timing.clock
    last_s = 0.0
    on_gap = timing.on_gap
    try:
        while data := await upstream.read():
            out = relay.feed(data)
            if relay.saw_done:
                watch.finishing(200, relay.usage)  # [DONE] ends the answer for the client
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
                now = clock()
                if last_s:
                    on_gap(now - last_s)
                else:
                    timing.first_byte_s = now
                    timing.on_first_byte(now - timing.arrived_s)
                last_s = now
    except EngineBroke as error:
        logger.warning(
            "%s: the engine broke its stream (%s); the client gets an error event", description, error
        )
        tail = relay.cut(f"the engine serving {description} stopped in the middle of the answer: {error}")
    else:
        engine_done = True
        tail = relay.end()
        if relay.interrupted:
            logger.warning(
                "%s: the engine ended its stream before the answer finished; the client gets an error event",
                description,
            )
    watch.finishing(ENGINE_BROKE_OFF if relay.interrupted else 200, relay.usage)
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    if relay.interrupted:
        return RelayOutcome(ENGINE_BROKE_OFF, relay.usage, engine_done, code="stream_interrupted")
    return RelayOutcome(200, relay.usage, engine_done)


async def relay_passthrough_stream(
    upstream: EngineResponse,
    send: Send,
    watch: ClientWatch,
    description: str,
    timing: ClientTiming,
    extra_headers: list[tuple[bytes, bytes]],
) -> RelayOutcome:
    """Send the engine's bytes as they come, unchanged; read the usage on the way (SSE only)."""
    content_type = upstream.header(b"content-type") or b"application/octet-stream"
    reader = UsageReader() if content_type.startswith(b"text/event-stream") else None
    headers = [
        (b"content-type", content_type),
        (b"cache-control", b"no-cache"),
        (b"x-accel-buffering", b"no"),
    ]
    await send(
        {"type": "http.response.start", "status": upstream.status, "headers": _with(headers, extra_headers)}
    )
    clock = timing.clock
    last_s = 0.0
    try:
        while data := await upstream.read():
            if reader is not None:
                reader.feed(data)
            await send({"type": "http.response.body", "body": data, "more_body": True})
            now = clock()
            if last_s:
                timing.on_gap(now - last_s)
            else:
                timing.first_byte_s = now
                timing.on_first_byte(now - timing.arrived_s)
            last_s = now
    except EngineBroke as error:
        logger.warning("%s: the engine broke its answer off (%s)", description, error)
        usage = reader.usage if reader is not None else None
        watch.finishing(ENGINE_BROKE_OFF, usage)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return RelayOutcome(ENGINE_BROKE_OFF, usage, engine_done=False, code="stream_interrupted")
    usage = reader.usage if reader is not None else None
    watch.finishing(upstream.status, usage)
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    return RelayOutcome(upstream.status, usage, engine_done=True)


async def relay_body(
    upstream: EngineResponse,
    model_rewrite: ModelNameRewrite | None,
    send: Send,
    watch: ClientWatch,
    description: str,
    *,
    normalise: bool,
    extra_headers: list[tuple[bytes, bytes]],
) -> RelayOutcome:
    """Send a whole answer (``normalise``: model name and reasoning in OpenAI's shape) or the error."""
    try:
        body = await upstream.read_all()
    except EngineBroke as error:
        logger.warning(
            "%s: the engine dropped the connection before its answer was complete (%s)", description, error
        )
        message = (
            f"the engine serving {description} closed the connection before its answer was complete ({error})"
        )
        body = error_json_bytes(message, status=ENGINE_BROKE_OFF, code="engine_unreachable")
        await send_whole(send, watch, ENGINE_BROKE_OFF, body, b"application/json", extra_headers)
        return RelayOutcome(ENGINE_BROKE_OFF, None, engine_done=False, code="engine_unreachable")
    status = upstream.status
    content_type = upstream.header(b"content-type") or b"application/json"
    usage = None
    is_json = content_type.startswith(b"application/json")
    if status == 200 and normalise:
        body, usage = normalise_success_body(body, model_rewrite)
    elif status == 200 and is_json:
        if model_rewrite is not None:
            body = model_rewrite.apply(body)
        usage = usage_from_body(body)
    elif normalise:
        body = normalise_error_body(body, status)
        content_type = b"application/json"
    await send_whole(send, watch, status, body, content_type, extra_headers, usage)
    return RelayOutcome(status, usage, engine_done=True)
