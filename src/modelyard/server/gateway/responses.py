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

from starlette.types import Receive, Scope, Send

from modelyard.http_client import AnswerBroken, Http1Response
from modelyard.server.door.http_protocol import DISCONNECT_EXTENSION
from modelyard.server.gateway.bodies import normalise_error_body, normalise_success_body
from modelyard.server.gateway.client_out import DirectClientOut, DirectWriting
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
    """Cancels the request's task when the client disconnects, until ``finishing()``.

    It learns of the disconnect from the server's disconnect callbacks when the server offers
    them (``door/http_protocol.py``: no task per request), else from a task waiting on
    ``receive()``.
    """

    def __init__(
        self,
        receive: Receive,
        task: asyncio.Task[object],
        loop: asyncio.AbstractEventLoop,
        disconnect_callbacks: list[Callable[[], None]] | None = None,
    ) -> None:
        self.client_gone = False
        self._task: asyncio.Task[object] | None
        # Called once, with the status and usage, just before the answer's last bytes are sent:
        # the proxy records the request there (the usage journal), so an answered request is on
        # disk before the client has all of its answer.
        self.on_finishing: Callable[[int, TokenUsage | None], None] | None = None
        self.recorded = False
        self._finishing = False
        self._task = task
        self._loop = loop
        self._callbacks = disconnect_callbacks
        self._watcher: asyncio.Task[None] | None = None
        if disconnect_callbacks is not None:
            disconnect_callbacks.append(self._disconnected)
        else:
            self._watcher = loop.create_task(self._watch(receive))

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
        if self._callbacks is not None:
            if self._disconnected in self._callbacks:
                self._callbacks.remove(self._disconnected)
        elif self._watcher is not None and not self._watcher.done():
            self._loop.call_soon(self._cancel_if_waiting)

    def _cancel_if_waiting(self) -> None:
        if self._watcher is not None and not self._watcher.done():
            self._watcher.cancel()

    def _disconnected(self) -> None:
        if not self._finishing and self._task is not None:
            self.client_gone = True
            self._task.cancel()

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if not self._finishing and self._task is not None:
                    self.client_gone = True
                    self._task.cancel()
                return


Exchange = Callable[[ClientWatch], Awaitable[None]]


def disconnect_callbacks_of(scope: Scope) -> list[Callable[[], None]] | None:
    """The list the server calls back when the client goes (``DISCONNECT_EXTENSION``), if any."""
    extension = scope.get("extensions", {}).get(DISCONNECT_EXTENSION)
    if extension is None:
        return None
    callbacks: list[Callable[[], None]] = extension["callbacks"]
    return callbacks


async def watched(
    receive: Receive,
    exchange: Exchange,
    loop: asyncio.AbstractEventLoop,
    disconnect_callbacks: list[Callable[[], None]] | None = None,
) -> None:
    """Run ``exchange(watch)``; a client disconnect cancels it (it cleans up in ``finally``).

    Call after the request body was read whole: the watch takes every later ``receive()``.
    ``disconnect_callbacks``: the server's (``disconnect_callbacks_of(scope)``), if it has them.
    """
    task = asyncio.current_task(loop)
    assert task is not None
    watch = ClientWatch(receive, task, loop, disconnect_callbacks)
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
    writing: DirectWriting,
    usage: TokenUsage | None = None,
) -> None:
    if watch is not None:
        watch.finishing(status, usage)
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    direct = writing.writer(send)
    if direct is not None:
        direct.send_whole(status, _with(headers, extra_headers), body)
        return
    await send({"type": "http.response.start", "status": status, "headers": _with(headers, extra_headers)})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class _OpenAiStream:
    """What both ways of relaying an OpenAI stream share: each piece through ``SseRelay``, the
    timing observers, the tail, the outcome. ``description`` names the request and engine in log
    lines and in the client's error event (``deployment 'demo' (instance 3)``); never content."""

    def __init__(self, relay: SseRelay, watch: ClientWatch, description: str, timing: ClientTiming) -> None:
        self.relay = relay
        self._watch = watch
        self._description = description
        self._timing = timing
        self._clock = timing.clock
        self._on_gap = timing.on_gap
        self._last_s = 0.0

    def piece(self, data: bytes) -> bytes:
        """What to send for ``data`` (``b""`` while an event is incomplete)."""
        relay = self.relay
        out = relay.feed(data)
        if relay.saw_done:
            self._watch.finishing(200, relay.usage)  # [DONE] ends the answer for the client
        return out

    def sent(self) -> None:
        now = self._clock()
        if self._last_s:
            self._on_gap(now - self._last_s)
        else:
            timing = self._timing
            timing.first_byte_s = now
            timing.on_first_byte(now - timing.arrived_s)
        self._last_s = now

    def tail_after_end(self) -> bytes:
        relay = self.relay
        tail = relay.end()
        if relay.interrupted:
            logger.warning(
                "%s: the engine ended its stream before the answer finished; the client gets an error event",
                self._description,
            )
        self._finishing()
        return tail

    def tail_after_break(self, error: AnswerBroken) -> bytes:
        logger.warning(
            "%s: the engine broke its stream (%s); the client gets an error event", self._description, error
        )
        tail = self.relay.cut(
            f"the engine serving {self._description} stopped in the middle of the answer: {error}"
        )
        self._finishing()
        return tail

    def _finishing(self) -> None:
        relay = self.relay
        self._watch.finishing(ENGINE_BROKE_OFF if relay.interrupted else 200, relay.usage)

    def outcome(self, engine_done: bool) -> RelayOutcome:
        relay = self.relay
        if relay.interrupted:
            return RelayOutcome(ENGINE_BROKE_OFF, relay.usage, engine_done, code="stream_interrupted")
        return RelayOutcome(200, relay.usage, engine_done)


async def relay_openai_stream(
    upstream: Http1Response,
    relay: SseRelay,
    send: Send,
    watch: ClientWatch,
    description: str,
    timing: ClientTiming,
    extra_headers: list[tuple[bytes, bytes]],
    writing: DirectWriting,
) -> RelayOutcome:
    """Send every event as it arrives; always end with ``data: [DONE]``."""
    stream = _OpenAiStream(relay, watch, description, timing)
    headers = _with(_SSE_HEADERS, extra_headers)
    direct = writing.writer(send)
    if direct is not None:
        return await _pipe_openai_stream(upstream, stream, direct, headers)
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    try:
        while data := await upstream.read():
            out = stream.piece(data)
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
                stream.sent()
    except AnswerBroken as error:
        tail = stream.tail_after_break(error)
        engine_done = False
    else:
        tail = stream.tail_after_end()
        engine_done = True
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    return stream.outcome(engine_done)


async def _pipe_openai_stream(
    upstream: Http1Response,
    stream: _OpenAiStream,
    out: DirectClientOut,
    headers: list[tuple[bytes, bytes]],
) -> RelayOutcome:
    """The stream relayed in the engine connection's callbacks, written straight to the client:
    no task wakes per piece; the head goes with the first piece when it came with the engine's
    head, and ``[DONE]`` with the body's end when the engine ends its answer in the same read.
    This task only waits for the end, and drains a slow client (reading from the engine stops
    meanwhile)."""
    out.begin_stream(200, headers)
    loop = upstream.loop
    relay = stream.relay

    def on_piece(data: bytes) -> None:
        piece = stream.piece(data)
        if not piece:
            return
        if relay.saw_done:
            out.hold(piece)
            loop.call_soon(out.flush)
        else:
            out.write(piece)
        stream.sent()
        if out.write_paused:
            upstream.pause_reading()
            upstream.wake()

    def on_end() -> None:
        out.end_stream(stream.tail_after_end())

    upstream.pipe(on_piece, on_end)
    # The client sees the answer begin when the engine's does, even before its first event.
    out.write_head()
    while True:
        try:
            await upstream.wait()
        except AnswerBroken as error:
            out.end_stream(stream.tail_after_break(error))
            return stream.outcome(engine_done=False)
        if upstream.complete:
            return stream.outcome(engine_done=True)
        if out.write_paused:
            await out.drain()
        upstream.resume_reading()


async def relay_passthrough_stream(
    upstream: Http1Response,
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
    except AnswerBroken as error:
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
    upstream: Http1Response,
    model_rewrite: ModelNameRewrite | None,
    send: Send,
    watch: ClientWatch,
    description: str,
    *,
    normalise: bool,
    extra_headers: list[tuple[bytes, bytes]],
    writing: DirectWriting,
) -> RelayOutcome:
    """Send a whole answer (``normalise``: model name and reasoning in OpenAI's shape) or the error."""
    try:
        body = await upstream.read_all()
    except AnswerBroken as error:
        logger.warning(
            "%s: the engine dropped the connection before its answer was complete (%s)", description, error
        )
        message = (
            f"the engine serving {description} closed the connection before its answer was complete ({error})"
        )
        body = error_json_bytes(message, status=ENGINE_BROKE_OFF, code="engine_unreachable")
        await send_whole(send, watch, ENGINE_BROKE_OFF, body, b"application/json", extra_headers, writing)
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
    await send_whole(send, watch, status, body, content_type, extra_headers, writing, usage)
    return RelayOutcome(status, usage, engine_done=True)
