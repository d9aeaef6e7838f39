"""uvicorn's httptools protocol with a bound on the request line and headers.

Without one, httptools keeps appending to a header value as its bytes arrive (each append copies
the value so far), so one 64 MiB header took 12.5 s of the event loop and every other client
waited. Here the bytes of a request's head (request line and headers) are counted as they are
fed to the parser: past ``max_header_bytes`` the connection is answered ``431`` and closed, and
nothing more of it is parsed. More than ``max_header_count`` headers is ``431`` too, once the
head is complete (its bytes are already bounded).

It also tells the app when the client goes, without a task waiting on ``receive()``: each
request's scope carries the ``DISCONNECT_EXTENSION`` extension, whose ``"callbacks"`` is a
list the app may append callbacks to; they are called when the connection is lost (the
gateway's ``ClientWatch`` uses it; a callback removes itself when its request is over).

uvicorn takes the class as ``uvicorn.Config(http=bounded_http_protocol(limits))``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from modelyard.server.door.limits import RequestLimits, describe_bytes
from modelyard.server.door.refusal import refusal_body

logger = logging.getLogger(__name__)

HEADERS_TOO_LARGE = 431
DISCONNECT_EXTENSION = "modelyard.on_disconnect"


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that refuses oversized heads; the limits are class attributes."""

    max_header_bytes = RequestLimits.max_header_bytes
    max_header_count = RequestLimits.max_header_count

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._refused = False
        # The callbacks of this connection's requests (DISCONNECT_EXTENSION).
        self._on_disconnect: list[Callable[[], None]] = []

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
        super().connection_lost(exc)
        callbacks, self._on_disconnect[:] = list(self._on_disconnect), []
        for callback in callbacks:
            callback()

    def on_headers_complete(self) -> None:
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
        head = (
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\n"
            b"connection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        self.transport.write(head + body)
        self.transport.close()


def bounded_http_protocol(limits: RequestLimits) -> type[BoundedHttpToolsProtocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` with ``limits``' header bounds."""
    return type(
        "BoundedHttpToolsProtocol",
        (BoundedHttpToolsProtocol,),
        {"max_header_bytes": limits.max_header_bytes, "max_header_count": limits.max_header_count},
    )
