"""Writing an answer straight onto the client's connection, when uvicorn serves it.

Through ASGI every piece of an answer is an awaited ``send()`` of a message dict, and uvicorn
writes the status line and headers, each piece and the end of the body as separate socket
writes. A streamed answer of one token is then three writes, and each piece of a long one waits
for the relay's task to be woken. ``DirectClientOut`` writes HTTP/1.1 itself onto the transport
of uvicorn's request cycle (``send.__self__``): the head goes out with the first piece, the last
piece with the end of the body, and a piece can be written from the engine connection's own
``data_received`` (``EngineResponse.pipe``), with no task in between.

It keeps the cycle's state as uvicorn's own ``send()`` would (``response_started``,
``response_complete``, keep-alive, the ``message_event`` that ends ``receive()``), so uvicorn's
keep-alive, pipelining and shutdown work unchanged. Anything that is not uvicorn's httptools
cycle (another server, a test transport) gets ``None`` from ``DirectClientOut.of`` and the
answer goes through ASGI as before.

Usage::

    out = DirectClientOut.of(send)          # None: use send()
    out.begin_stream(200, headers)          # held for the first piece, if it is here
    out.write_head()                        # or sent alone
    out.write(b"data: ...\\n\\n")            # synchronous; nothing once the client is gone
    out.end_stream(b"data: [DONE]\\n\\n")    # the last piece and the body's end, one write
"""

from __future__ import annotations

import asyncio

from starlette.types import Send
from uvicorn.protocols.http.httptools_impl import HEADER_VALUE_RE, STATUS_LINE, RequestResponseCycle

_END_OF_BODY = b"0\r\n\r\n"


def _frame(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class DirectClientOut:
    """One answer written onto uvicorn's transport; see the module's docstring."""

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle
        self._transport: asyncio.Transport = cycle.transport
        self._head: bytes | None = None
        self._held: list[bytes] = []

    @classmethod
    def of(cls, send: Send) -> DirectClientOut | None:
        """The direct writer for ``send`` when it is uvicorn's httptools cycle, before any answer."""
        cycle = getattr(send, "__self__", None)
        if not isinstance(cycle, RequestResponseCycle) or cycle.response_started:
            return None
        if cycle.scope.get("method") == "HEAD" or cycle.transport.is_closing():
            return None
        return cls(cycle)

    @property
    def write_paused(self) -> bool:
        """The client reads slower than the engine writes: its buffer is over uvicorn's mark."""
        return bool(self._cycle.flow.write_paused) and not self._cycle.disconnected

    async def drain(self) -> None:
        await self._cycle.flow.drain()

    def begin_stream(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """A chunked answer's head; written with the first piece."""
        self._head = self._start(status, headers, b"transfer-encoding: chunked\r\n")

    def write(self, data: bytes) -> None:
        """One piece of the stream (nothing is written for ``b""`` or once the client is gone)."""
        if not data or self._cycle.disconnected:
            return
        frame = _frame(data)
        if self._head is not None:
            frame = self._head + frame
            self._head = None
        self._transport.write(frame)

    def write_head(self) -> None:
        """Send the held head now (the engine has begun its answer; the first piece is not here)."""
        if self._head is not None and not self._cycle.disconnected:
            self._transport.write(self._head)
        self._head = None

    def hold(self, data: bytes) -> None:
        """A piece that is probably the last: kept for ``end_stream`` to write with the body's
        end; ``flush`` writes it if the end does not come in this turn of the loop."""
        if data:
            self._held.append(data)

    def flush(self) -> None:
        held, self._held = self._held, []
        for data in held:
            self.write(data)

    def end_stream(self, tail: bytes) -> None:
        """The last piece, anything held, and the end of the chunked body, in one write."""
        cycle = self._cycle
        if cycle.response_complete:
            return
        pieces = [*self._held, tail]
        self._held = []
        frames = b"".join(_frame(piece) for piece in pieces if piece) + _END_OF_BODY
        if self._head is not None:
            frames = self._head + frames
            self._head = None
        if not cycle.disconnected:
            self._transport.write(frames)
        self._complete()

    def send_whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """A whole answer of known length: head and body in one write."""
        head = self._start(status, headers, b"content-length: %d\r\n" % len(body))
        if not self._cycle.disconnected:
            self._transport.write(head + body)
        self._complete()

    def _start(self, status: int, headers: list[tuple[bytes, bytes]], framing: bytes) -> bytes:
        cycle = self._cycle
        cycle.response_started = True
        cycle.waiting_for_100_continue = False
        cycle.chunked_encoding = framing.startswith(b"transfer-encoding")
        parts = [STATUS_LINE[status]]
        for name, value in (*cycle.default_headers, *headers):
            if name == b"content-length":
                continue  # the framing is this writer's
            if HEADER_VALUE_RE.search(value):
                raise RuntimeError(f"invalid value of the response header {name!r}")
            parts += (name, b": ", value, b"\r\n")
        if not cycle.keep_alive:
            parts.append(b"connection: close\r\n")
        parts += (framing, b"\r\n")
        return b"".join(parts)

    def _complete(self) -> None:
        cycle = self._cycle
        cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            self._transport.close()
        cycle.on_response()
