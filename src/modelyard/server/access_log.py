"""``modelyard serve --access-log``: one line per HTTP answer, from the process that answered it.

uvicorn's own access log cannot see most ``/v1`` answers (the gateway writes them straight onto
the connection, ``gateway/client_out.py``) and has no size, duration or request id, so the
server keeps its own, in every process that answers: the gateway workers log ``/v1``, the main
process everything else (the workers relay it there; the client address is the one the worker
saw, through ``X-Forwarded-For`` on the private socket). With ``--gateway-workers 0`` the main
process logs everything. uvicorn's access log stays off, so nothing is logged twice.

A line, through the logger ``modelyard.access`` at INFO (the process name and pid come first,
from the server's log format)::

    127.0.0.1:50312 - "POST /v1/chat/completions HTTP/1.1" 200 1532 41.2ms 3f9a0c61d2e40000000001

client address (``host:port``; the host alone for requests a worker relayed), method, path (the
query string is left out: it may carry a token), HTTP version, status (``-`` when the client
left before any answer), body bytes sent, the time from the request's head being read to the
answer's last byte, and the answer's ``x-request-id`` (``-`` for answers without one). Never a
body, never a header's value.

Usage::

    enable_access_log()                    # the logger at INFO, in each process that logs
    app = AccessLog(app)                   # every answer
    app = AccessLog(app, prefix="/v1/")    # only /v1 (a gateway worker)
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

ACCESS_LOGGER_NAME = "modelyard.access"
access_logger = logging.getLogger(ACCESS_LOGGER_NAME)


def enable_access_log() -> None:
    """Let the access lines through to the handlers the process installed (the CLI's, a worker's)."""
    access_logger.setLevel(logging.INFO)


class MeteredSend:
    """ASGI ``send`` that notes the answer's status, request id and body bytes on the way.

    The gateway's direct writer (``DirectClientOut``) bypasses ``send``; it finds the server's
    own ``send`` in ``inner`` and reports what it writes through ``started`` and ``wrote``.
    """

    __slots__ = ("body_bytes", "inner", "request_id", "status")

    def __init__(self, inner: Send) -> None:
        self.inner = inner
        self.status: int | None = None
        self.request_id = "-"
        self.body_bytes = 0

    def started(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        for name, value in headers:
            if name == b"x-request-id":
                self.request_id = value.decode("latin-1")

    def wrote(self, body_bytes: int) -> None:
        self.body_bytes += body_bytes

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.started(message["status"], list(message.get("headers", ())))
        elif kind == "http.response.body":
            self.body_bytes += len(message.get("body", b""))
        await self.inner(message)


def access_line(scope: Scope, meter: MeteredSend, duration_s: float) -> str:
    client = scope.get("client")
    # A relayed request's address has no port (X-Forwarded-For): the host alone.
    address = (f"{client[0]}:{client[1]}" if client[1] else str(client[0])) if client else "-"
    status = str(meter.status) if meter.status is not None else "-"
    return (
        f'{address} - "{scope["method"]} {scope["path"]} HTTP/{scope.get("http_version", "1.1")}" '
        f"{status} {meter.body_bytes} {duration_s * 1000:.1f}ms {meter.request_id}"
    )


class AccessLog:
    """ASGI middleware: one access line per HTTP answer (``prefix``: only paths starting so)."""

    def __init__(self, app: ASGIApp, prefix: str | None = None) -> None:
        self.app = app
        self._prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        prefix = self._prefix
        if scope["type"] != "http" or (prefix is not None and not scope["path"].startswith(prefix)):
            await self.app(scope, receive, send)
            return
        started_s = time.perf_counter()
        meter = MeteredSend(send)
        try:
            await self.app(scope, receive, meter)
        finally:
            access_logger.info("%s", access_line(scope, meter, time.perf_counter() - started_s))
