"""Keep-alive HTTP/1.1 connections for the benchmark client, on asyncio protocols and httptools.

The client must cost far less than what it measures. A streamed request through aiohttp cost
about 970 µs of client CPU here (16 one-token chunks, loopback), most of it in the per-chunk
stream reader (a future and a wake-up per read); ``vllm bench serve`` costs about 1,200 µs. Here
bytes go from the socket straight into the response parser (``httptools``, the parser uvicorn
uses) and from its body callback straight into the caller's sink, with no task or future per
chunk: about 250 µs per request. Arrival times are taken when the bytes are handed over by the
event loop, before any parsing.

    pool = ConnectionPool("http://127.0.0.1:8000")
    await pool.request(b"POST /v1/chat/completions HTTP/1.1\\r\\n...", sink, timeout_s=600)
    await pool.close()

Plain HTTP and HTTPS (``ssl`` default context); no proxies, no HTTP/2, no redirects.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools

from modelyard.errors import InvalidInput


class ConnectionClosed(Exception):
    """The server closed the connection before the response was complete."""

    def __init__(self, message: str, *, received_bytes: int) -> None:
        super().__init__(message)
        self.received_bytes = received_bytes


class ResponseSink(Protocol):
    """Receives one response as it arrives."""

    def on_status(self, status: int) -> None: ...

    def on_body(self, data: bytes, arrived_ns: int) -> None:
        """A piece of the (de-chunked) body, with the monotonic ns time its bytes arrived."""


class _Connection(asyncio.Protocol):
    """One TCP connection; carries one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.keep_alive = False
        self.received_bytes = 0
        self._parser: httptools.HttpResponseParser | None = None
        self._sink: ResponseSink | None = None
        self._done: asyncio.Future[None] | None = None
        self._arrived_ns = 0
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without inheriting from it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._arrived_ns = time.perf_counter_ns()
        self.received_bytes += len(data)
        if self._parser is None:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(
                ConnectionClosed(
                    "the server asked for a protocol upgrade", received_bytes=self.received_bytes
                )
            )
        except httptools.HttpParserError as error:
            self._fail(
                ConnectionClosed(f"malformed HTTP response: {error}", received_bytes=self.received_bytes)
            )

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, error: Exception | None) -> None:
        self.closed = True
        reason = f": {error}" if error else ""
        self._fail(
            ConnectionClosed(f"the server closed the connection{reason}", received_bytes=self.received_bytes)
        )

    # -- httptools callbacks ---------------------------------------------------------------------

    def on_headers_complete(self) -> None:
        if self._parser is not None and self._sink is not None:
            self._sink.on_status(self._parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        if self._sink is not None:
            self._sink.on_body(body, self._arrived_ns)

    def on_message_complete(self) -> None:
        if self._parser is not None:
            self.keep_alive = self._parser.should_keep_alive()
        if self._timer is not None:
            self._timer.cancel()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    # -- use ------------------------------------------------------------------------------------

    def send(self, request: bytes, sink: ResponseSink, timeout_s: float) -> asyncio.Future[None]:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._sink = sink
        self._parser = httptools.HttpResponseParser(self)
        self.received_bytes = 0
        self.keep_alive = False
        self._done = loop.create_future()
        self._timer = loop.call_later(timeout_s, self._timed_out, timeout_s)
        self.transport.write(request)
        return self._done

    def _timed_out(self, timeout_s: float) -> None:
        self._fail(TimeoutError(f"no complete answer within {timeout_s:g} s"))
        self.close()

    def _fail(self, error: Exception) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._done is not None and not self._done.done():
            self._done.set_exception(error)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class ConnectionPool:
    """Keep-alive connections to one server; a request takes an idle one or opens a new one."""

    def __init__(self, base_url: str, *, connect_timeout_s: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(
                f"base URL {base_url!r} is not an http:// or https:// URL", hint="http://host:8000"
            )
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.host_header = parts.netloc
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self._connect_timeout_s = connect_timeout_s
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, connection = await asyncio.wait_for(
            loop.create_connection(_Connection, self.host, self.port, ssl=self._ssl), self._connect_timeout_s
        )
        self._all.add(connection)
        return connection

    async def request(self, request: bytes, sink: ResponseSink, *, timeout_s: float) -> None:
        """Send ``request`` and feed the response to ``sink`` until it is complete.

        A reused connection that the server had closed while idle is retried once on a new
        connection, when nothing of the answer had arrived. Raises ``ConnectionClosed``,
        ``TimeoutError`` or ``OSError``.
        """
        while self._idle:
            connection = self._idle.pop()
            if connection.closed:
                self._all.discard(connection)
                continue
            try:
                await connection.send(request, sink, timeout_s)
            except ConnectionClosed as error:
                self._all.discard(connection)
                if error.received_bytes:
                    raise
                break  # stale keep-alive connection: retry once on a fresh one
            except BaseException:
                self._discard(connection)
                raise
            self._release(connection)
            return
        connection = await self._open()
        try:
            await connection.send(request, sink, timeout_s)
        except BaseException:
            self._discard(connection)
            raise
        self._release(connection)

    def _release(self, connection: _Connection) -> None:
        if connection.keep_alive and not connection.closed:
            self._idle.append(connection)
        else:
            self._discard(connection)

    def _discard(self, connection: _Connection) -> None:
        connection.close()
        self._all.discard(connection)

    async def close(self) -> None:
        for connection in list(self._all):
            connection.close()
        self._all.clear()
        self._idle.clear()
