"""Writing an answer straight onto the client's connection, when uvicorn serves it.

Through ASGI every piece of an answer is an awaited ``send()`` of a message dict, and uvicorn
writes the status line and headers, each piece and the end of the body as separate socket
writes. A streamed answer of one token is then three writes, and each piece of a long one waits
for the relay's task to be woken. ``DirectClientOut`` writes HTTP/1.1 itself onto the transport
of uvicorn's request cycle (``send.__self__``): the head goes out with the first piece, the last
piece with the end of the body, and a piece can be written from the engine connection's own
``data_received`` (``Http1Response.pipe``), with no task in between.

It keeps the cycle's state as uvicorn's own ``send()`` would (``response_started``,
``response_complete``, keep-alive, the ``message_event`` that ends ``receive()``), so uvicorn's
keep-alive, pipelining and shutdown work unchanged. Anything that is not uvicorn's httptools
cycle (another server, a test transport) gets ``None`` from ``DirectWriting.writer`` and the
answer goes through ASGI as before.

These are uvicorn's private names (``RequestResponseCycle`` and its attributes, ``FlowControl``,
``STATUS_LINE``, ``HEADER_VALUE_RE``), read in the releases of ``TESTED_UVICORN`` (the window
``pyproject.toml`` pins). ``DirectWriting`` checks once, at start, that each is there with the
shape this module uses (a trial cycle is built and looked at); if one moved, every answer goes
through plain ASGI ``send()`` and one warning names what moved.

Usage::

    writing = DirectWriting.for_installed_uvicorn()   # checked once per process
    out = writing.writer(send)              # None: use send()
    out.begin_stream(200, headers)          # held for the first piece, if it is here
    out.write_head()                        # or sent alone
    out.write(b"data: ...\\n\\n")            # synchronous; nothing once the client is gone
    out.end_stream(b"data: [DONE]\\n\\n")    # the last piece and the body's end, one write
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import re
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from starlette.types import Send

from modelyard.server.access_log import MeteredSend

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

logger = logging.getLogger(__name__)

# The uvicorn releases whose private names this module was read against and tested with. From
# 0.53 on, a request's "Connection: close" sets the cycle's keep_alive when the request is
# parsed (before, uvicorn's send() found it in the request's headers, which the direct writer
# would not): the window's floor.
TESTED_UVICORN = ">=0.53,<0.56"
_HTTPTOOLS_MODULE = "uvicorn.protocols.http.httptools_impl"
_FLOW_CONTROL_MODULE = "uvicorn.protocols.http.flow_control"
# What the direct writer reads and sets on a cycle, and on its flow control.
CYCLE_ATTRIBUTES = (
    "scope",
    "transport",
    "flow",
    "default_headers",
    "message_event",
    "on_response",
    "disconnected",
    "keep_alive",
    "waiting_for_100_continue",
    "response_started",
    "response_complete",
    "chunked_encoding",
)
FLOW_ATTRIBUTES = ("write_paused", "drain")


class _TrialTransport(asyncio.Transport):
    """What a trial cycle is built with: never written to."""


def _trial_problem(cycle_class: type, flow_class: type) -> str | None:
    transport = _TrialTransport()
    try:
        flow = flow_class(transport)
    except TypeError as error:
        return f"FlowControl(transport) failed: {error}"
    missing = [name for name in FLOW_ATTRIBUTES if not hasattr(flow, name)]
    if missing:
        return f"FlowControl has no {', '.join(missing)}"
    try:
        trial = cycle_class(
            scope={"type": "http", "method": "GET", "path": "/", "headers": []},
            transport=transport,
            flow=flow,
            logger=logger,
            access_logger=logger,
            access_log=False,
            default_headers=[],
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=True,
            on_response=lambda: None,
        )
    except TypeError as error:
        name = cycle_class.__name__
        return f"{name}(...) no longer takes the arguments of uvicorn{TESTED_UVICORN}: {error}"
    missing = [name for name in CYCLE_ATTRIBUTES if not hasattr(trial, name)]
    if missing:
        return f"{cycle_class.__name__} has no {', '.join(missing)}"
    if not callable(getattr(trial, "send", None)):
        return f"{cycle_class.__name__} has no send()"
    return None


def _status_lines_problem(status_lines: object) -> str | None:
    if not isinstance(status_lines, Mapping):
        return "STATUS_LINE is not a mapping of status codes"
    line = status_lines.get(200)
    if not isinstance(line, bytes) or not line.startswith(b"HTTP/1.1 200") or not line.endswith(b"\r\n"):
        return f"STATUS_LINE[200] is {line!r}, not b'HTTP/1.1 200 OK\\r\\n'"
    missing = [code for code in range(100, 600) if code not in status_lines]
    if missing:
        return f"STATUS_LINE has no line for {len(missing)} status codes (e.g. {missing[0]})"
    return None


class DirectWriting:
    """Whether answers may be written straight onto uvicorn's connection; checked once.

    ``problem`` names what moved in uvicorn (None: nothing did, ``enabled``). Built by
    ``for_installed_uvicorn()`` in the server; a test passes a stand-in for any of the names.
    """

    def __init__(
        self,
        cycle_class: type | None = None,
        *,
        flow_class: type | None = None,
        status_lines: object = None,
        header_value_pattern: object = None,
    ) -> None:
        self.problem: str | None = None
        module: ModuleType | None = None
        flow_module: ModuleType | None = None
        try:
            module = importlib.import_module(_HTTPTOOLS_MODULE)
            flow_module = importlib.import_module(_FLOW_CONTROL_MODULE)
        except ImportError as error:
            self.problem = f"{error.name or _HTTPTOOLS_MODULE} cannot be imported ({error})"
        if module is not None and flow_module is not None:
            cycle_class = cycle_class or getattr(module, "RequestResponseCycle", None)
            flow_class = flow_class or getattr(flow_module, "FlowControl", None)
            status_lines = status_lines if status_lines is not None else getattr(module, "STATUS_LINE", None)
            if header_value_pattern is None:
                header_value_pattern = getattr(module, "HEADER_VALUE_RE", None)
            self.problem = self._check(cycle_class, flow_class, status_lines, header_value_pattern)
        self.enabled = self.problem is None
        self._cycle_class: type = cycle_class if self.enabled and cycle_class is not None else type(None)
        self._status_lines: Mapping[int, bytes] = status_lines if self.enabled else {}  # type: ignore[assignment]
        self._header_value_pattern: re.Pattern[bytes] = (
            header_value_pattern if self.enabled else re.compile(b"$^")  # type: ignore[assignment]
        )
        if self.problem is not None:
            logger.warning(
                "answers go through ASGI send() instead of straight onto the connection: uvicorn's "
                "private names moved (%s); the gateway was tested with uvicorn%s",
                self.problem,
                TESTED_UVICORN,
            )

    @staticmethod
    def _check(
        cycle_class: type | None, flow_class: type | None, status_lines: object, header_value_pattern: object
    ) -> str | None:
        if not isinstance(cycle_class, type):
            return f"{_HTTPTOOLS_MODULE}.RequestResponseCycle is gone"
        if not isinstance(flow_class, type):
            return f"{_FLOW_CONTROL_MODULE}.FlowControl is gone"
        pattern = header_value_pattern
        if not isinstance(pattern, re.Pattern) or not isinstance(pattern.pattern, bytes):
            return f"{_HTTPTOOLS_MODULE}.HEADER_VALUE_RE is not a compiled bytes pattern"
        return _status_lines_problem(status_lines) or _trial_problem(cycle_class, flow_class)

    @staticmethod
    def for_installed_uvicorn() -> DirectWriting:
        """The check of the uvicorn this process runs, made (and warned about) once."""
        return _installed_uvicorn_writing()

    def writer(self, send: Send) -> DirectClientOut | None:
        """The direct writer for ``send`` when it is uvicorn's httptools cycle, before any answer
        (``send`` may be the access log's ``MeteredSend`` around it: the writer reports to it)."""
        meter = send if isinstance(send, MeteredSend) else None
        server_send: Any = meter.inner if meter is not None else send
        found = getattr(server_send, "__self__", None)
        if not isinstance(found, self._cycle_class):
            return None
        cycle = cast("RequestResponseCycle", found)
        if cycle.response_started:
            return None
        if cycle.scope.get("method") == "HEAD" or cycle.transport.is_closing():
            return None
        return DirectClientOut(cycle, self._status_lines, self._header_value_pattern, meter)


@functools.cache
def _installed_uvicorn_writing() -> DirectWriting:
    return DirectWriting()


_END_OF_BODY = b"0\r\n\r\n"


def _frame(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class DirectClientOut:
    """One answer written onto uvicorn's transport; see the module's docstring."""

    def __init__(
        self,
        cycle: RequestResponseCycle,
        status_lines: Mapping[int, bytes],
        header_value_pattern: re.Pattern[bytes],
        meter: MeteredSend | None = None,
    ) -> None:
        self._cycle = cycle
        self._transport: asyncio.Transport = cycle.transport
        self._status_lines = status_lines
        self._header_value_pattern = header_value_pattern
        self._meter = meter
        self._head: bytes | None = None
        self._held: list[bytes] = []

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
        if self._meter is not None:
            self._meter.wrote(len(data))
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
        if self._meter is not None and not cycle.disconnected:
            self._meter.wrote(sum(len(piece) for piece in pieces))
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
            if self._meter is not None:
                self._meter.wrote(len(body))
        self._complete()

    def _start(self, status: int, headers: list[tuple[bytes, bytes]], framing: bytes) -> bytes:
        cycle = self._cycle
        cycle.response_started = True
        cycle.waiting_for_100_continue = False
        cycle.chunked_encoding = framing.startswith(b"transfer-encoding")
        if self._meter is not None:
            self._meter.started(status, headers)
        parts = [self._status_lines[status]]
        invalid_value = self._header_value_pattern.search
        for name, value in (*cycle.default_headers, *headers):
            if name == b"content-length":
                continue  # the framing is this writer's
            if invalid_value(value):
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
