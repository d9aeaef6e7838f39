"""uvicorn's httptools protocol with a bound on the request line and headers.

Without one, httptools keeps appending to a header value as its bytes arrive (each append copies
the value so far), so one 64 MiB header took 12.5 s of the event loop and every other client
waited. Here the bytes of a request's head (request line and headers) are counted as they are
fed to the parser: past ``max_header_bytes`` the connection is answered ``431`` and closed, and
nothing more of it is parsed. More than ``max_header_count`` headers is ``431`` too, once the
head is complete (its bytes are already bounded).

A request's head must also arrive in time: ``header_timeout_s`` from the connection's opening,
or from the end of the previous response on a kept-alive connection (uvicorn's own
``timeout_keep_alive`` stops counting at the first byte, so a client sending one byte a second
was held for ever). Past it, a connection that sent part of a head is answered ``408`` and
closed, an idle one is closed. At most ``max_slow_connections`` connections of the process are
given that long: a connection opened while that many are still reading their head must send
its head within ``CROWDED_HEADER_TIMEOUT_S`` (a client that sends its head at once is served;
slow ones past the cap are closed after a second).

It also tells the app when the client goes, without a task waiting on ``receive()``: each
request's scope carries the ``DISCONNECT_EXTENSION`` extension, whose ``"callbacks"`` is a
list the app may append callbacks to; they are called when the connection is lost (the
gateway's ``ClientWatch`` uses it; a callback removes itself when its request is over).

uvicorn takes the class as ``uvicorn.Config(http=bounded_http_protocol(limits))``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from modelyard.server.door.limits import CROWDED_HEADER_TIMEOUT_S, RequestLimits, describe_bytes
from modelyard.server.door.refusal import refusal_body

logger = logging.getLogger(__name__)

HEADERS_TOO_LARGE = 431
REQUEST_TIMEOUT = 408
DISCONNECT_EXTENSION = "modelyard.on_disconnect"


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that refuses oversized heads; the limits are class attributes."""

    max_header_bytes = RequestLimits.max_header_bytes
    max_header_count = RequestLimits.max_header_count
    header_timeout_s: float = RequestLimits.header_timeout_s
    max_slow_connections = RequestLimits.max_slow_connections
    # The connections (of the server this class serves) that are waiting for a request head.
    reading_heads: ClassVar[set[BoundedHttpToolsProtocol]] = set()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._refused = False
        # When the head being waited for is due (None: no head is waited for).
        self._head_deadline: asyncio.TimerHandle | None = None
        # The callbacks of this connection's requests (DISCONNECT_EXTENSION).
        self._on_disconnect: list[Callable[[], None]] = []

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        crowded = len(self.reading_heads) >= self.max_slow_connections
        self._wait_for_head(
            min(CROWDED_HEADER_TIMEOUT_S, self.header_timeout_s) if crowded else self.header_timeout_s
        )

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._in_head:
            super().data_received(data)
            return
        if self._head_bytes + len(data) <= self.max_header_bytes:
            # The common read: a whole request (head and body) within the allowance, fed at once.
            self._head_bytes += len(data)
            super().data_received(data)
            return
        # Feed the head in pieces no longer than what is left of its allowance, so that bytes
        # of a body arriving in the same read are not counted against the head.
        while self._in_head and data:
            allowance = self.max_header_bytes - self._head_bytes
            if allowance <= 0:
                self._refuse(
                    f"the request line and headers are over {describe_bytes(self.max_header_bytes)}",
                    "max_header_bytes",
                )
                return
            piece, data = data[:allowance], data[allowance:]
            self._head_bytes += len(piece)
            super().data_received(piece)
            if self._refused or self.transport.is_closing():
                return
        if data:
            super().data_received(data)

    # Parser callbacks (httptools calls them while data_received feeds it).

    def on_message_begin(self) -> None:
        self._in_head = True
        super().on_message_begin()
        self.scope["extensions"] = {DISCONNECT_EXTENSION: {"callbacks": self._on_disconnect}}

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_arrived()
        super().connection_lost(exc)
        callbacks, self._on_disconnect[:] = list(self._on_disconnect), []
        for callback in callbacks:
            callback()

    def on_headers_complete(self) -> None:
        self._head_arrived()
        self._in_head = False
        self._head_bytes = 0
        # uvicorn's on_header appends each header; their bytes are bounded above, so they are
        # counted once the head is complete rather than one call at a time.
        header_count = len(self.headers)
        if header_count > self.max_header_count:
            self._refuse(
                f"the request has {header_count} headers; at most {self.max_header_count} are accepted",
                "max_header_count",
            )
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_head = True
        if not self._refused:
            super().on_message_complete()

    def on_response_complete(self) -> None:
        # A request whose head came while this one was answered (pipelined) starts now; else the
        # next head is waited for, from now.
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing() and self._head_deadline is None:
            self._wait_for_head(self.header_timeout_s)

    def _wait_for_head(self, seconds: float) -> None:
        self.reading_heads.add(self)
        self._head_deadline = self.loop.call_later(seconds, self._head_timed_out)

    def _head_arrived(self) -> None:
        self.reading_heads.discard(self)
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        self.reading_heads.discard(self)
        if self.transport.is_closing():
            return
        if self._head_bytes == 0:
            self.transport.close()  # idle: nothing of a request came, nothing to answer
            return
        self._refused = True
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        logger.info("closed a connection from %s: its request head did not arrive in time", client)
        body = refusal_body(
            REQUEST_TIMEOUT,
            "the request line and headers did not arrive in time",
            "header_timeout",
            hint="send the request head at once; the server's limit is set by "
            + RequestLimits.environment_variable("header_timeout_s"),
        )
        self._close_with(b"HTTP/1.1 408 Request Timeout\r\n", body)

    def _refuse(self, message: str, setting: str) -> None:
        self._refused = True
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        logger.warning("refused a request from %s: %s", client, message)
        variable = RequestLimits.environment_variable(setting)
        body = refusal_body(
            HEADERS_TOO_LARGE,
            message,
            "headers_too_large",
            hint=f"send smaller headers; the server's limit is set by {variable}",
        )
        self._close_with(b"HTTP/1.1 431 Request Header Fields Too Large\r\n", body)

    def _close_with(self, status_line: bytes, body: bytes) -> None:
        head = (
            status_line + b"content-type: application/json\r\n"
            b"connection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        self.transport.write(head + body)
        self.transport.close()


def bounded_http_protocol(limits: RequestLimits) -> type[BoundedHttpToolsProtocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` with ``limits``' bounds on heads."""
    bounds: dict[str, object] = {
        "max_header_bytes": limits.max_header_bytes,
        "max_header_count": limits.max_header_count,
        "header_timeout_s": float(limits.header_timeout_s),
        "max_slow_connections": limits.max_slow_connections,
        "reading_heads": set(),
    }
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), bounds)
