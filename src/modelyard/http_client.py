"""The HTTP/1.1 client of the gateway (to engines) and of the benchmark (to the server it
measures): keep-alive connections on asyncio protocols and httptools.

Why not aiohttp (the gateway used it before): per relayed chunk aiohttp re-arms its read timer (a
timer cancelled and pushed back on the loop's heap for every piece of a stream) and moves the
bytes through its Python stream reader; per request it builds a request object, parses the URL
and fills multidicts. Measured on this project's benchmark upstream, that was most of the
gateway's CPU per request and about half of it per chunk; a streamed benchmark request cost about
970 µs of client CPU (16 one-token chunks, loopback) against about 250 µs here. The response
bytes go from the socket into httptools (the parser uvicorn uses) and from its body callback into
a list the reader drains, or straight into the caller's sink (``Http1Response.pipe``): no task or
future per chunk.

Timeouts: connecting has its own limit; a response is only ever timed out for *stalling*: no
byte for ``read_timeout_s``. A watchdog task looks at the open requests once a second (a time
stamp per chunk, no timer per chunk), so a reasoning model may think for minutes as long as the
engine keeps its connection alive, and a dead one is noticed within a second of the limit. A
limit on the whole answer is the caller's (``asyncio.timeout`` around it, then ``close()``).

Plain HTTP and HTTPS (``ssl`` default context); no proxies, no HTTP/2, no redirects. With
``stamp_arrivals`` each response knows when its latest bytes came off the socket
(``Http1Response.arrived_ns``, ``time.perf_counter_ns()`` taken before they are parsed).

Usage::

    client = Http1Client(connect_timeout_s=5, read_timeout_s=1800, keepalive_expiry_s=4)
    client.start()                                  # inside the running event loop
    response = await client.post("http://127.0.0.1:8000", "/v1/chat/completions", headers, body)
    # (or client.get("http://127.0.0.1:8000", "/v1/models", headers): no body)
    while piece := await response.read():           # b"" at the end of the body
        ...
    response.release()                              # or response.close() to abort the request
    await client.close()
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Sequence
from typing import cast
from urllib.parse import urlsplit

import httptools

# Stop reading from a server while this much of its answer waits for a slow reader.
_HIGH_WATER_BYTES = 1 << 20
# Where connections go: host, port and whether it is TLS.
_Address = tuple[str, int, bool]


class ServerUnreachable(Exception):
    """The server could not be connected to (refused, timed out): nothing was sent."""


class ClosedBeforeAnswer(Exception):
    """The server closed the connection before any byte of an answer: safe to send again."""


class AnswerBroken(Exception):
    """The answer began but did not end: the connection closed, failed or stalled."""


class _Connection(asyncio.Protocol):
    """One keep-alive TCP connection to a server; one request at a time."""

    def __init__(self, client: Http1Client, address: _Address) -> None:
        self._client = client
        self.loop = client.loop
        self.address = address
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.last_activity = 0.0
        self.arrived_ns = 0
        self.response: Http1Response | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._framed = False
        self._received_any = False
        self._reading_paused = False

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without inheriting from it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        client = self._client
        self.last_activity = client.loop_time()
        if client.stamp_arrivals:
            self.arrived_ns = time.perf_counter_ns()
        parser = self._parser
        if parser is None:
            # Bytes while idle: the connection's state is unknown, never reuse it.
            self.close()
            return
        self._received_any = True
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(AnswerBroken(f"malformed HTTP response from the {self._client.peer}: {error}"))
            self.close()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, error: Exception | None) -> None:
        self.closed = True
        self._client._forget(self)
        response = self.response
        if response is None or response.complete:
            return
        peer = self._client.peer
        if not self._received_any:
            closed = f"the {peer} closed the connection before answering{_reason(error)}"
            self._fail(ClosedBeforeAnswer(closed))
        elif response.status and response.until_close:
            response._finish()
        else:
            self._fail(AnswerBroken(f"the {peer} closed the connection mid-answer{_reason(error)}"))

    # -- httptools callbacks ---------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        self._headers.append((name, value))
        if name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value.lower()):
            self._framed = True

    def on_headers_complete(self) -> None:
        response = self.response
        parser = self._parser
        if response is None or parser is None:
            return
        headers = self._headers
        self._headers = []
        # Neither a length nor chunks: the body ends when the server closes the connection.
        response._begin(parser.get_status_code(), headers, until_close=not self._framed)

    def on_body(self, body: bytes) -> None:
        response = self.response
        if response is None:
            return
        response._add(body)
        if response.buffered_bytes > _HIGH_WATER_BYTES and not self._reading_paused and self.transport:
            self._reading_paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        response = self.response
        parser = self._parser
        if response is None or parser is None:
            return
        response.keep_alive = parser.should_keep_alive()
        response._finish()

    # -- used by Http1Client and Http1Response -------------------------------------------------

    def send(self, request: Sequence[bytes], response: Http1Response) -> None:
        assert self.transport is not None
        self.response = response
        self._parser = httptools.HttpResponseParser(self)
        self._headers = []
        self._framed = False
        self._received_any = False
        self.last_activity = self._client.loop_time()
        self.transport.writelines(request)

    def pause(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def drained(self) -> None:
        """The reader took what was buffered: read from the server again."""
        if self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = False
            self.transport.resume_reading()

    def stalled(self, read_timeout_s: float) -> None:
        self._fail(AnswerBroken(f"the {self._client.peer} sent nothing for {read_timeout_s:g} s"))
        self.close()

    def finished(self) -> None:
        """The request is over; the connection is idle (or closed)."""
        self.response = None
        self._parser = None

    def _fail(self, error: Exception) -> None:
        if self.response is not None:
            self.response._fail(error)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _reason(error: Exception | None) -> str:
    return f" ({error})" if error else ""


class Http1Response:
    """One answer: ``status`` and ``headers`` once it has begun, then its body by pieces."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        # The client's loop (asyncio.get_running_loop() costs a getpid() system call per call).
        self._loop = connection.loop
        self._head: asyncio.Future[None] = self._loop.create_future()
        self._waiter: asyncio.Future[None] | None = None
        self._pieces: list[bytes] = []
        self._error: Exception | None = None
        self.buffered_bytes = 0
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.complete = False
        self.keep_alive = False
        self.until_close = False
        self._released = False
        # Set by pipe(): each piece goes to the sink as it arrives, the end to on_end.
        self._sink: Callable[[bytes], None] | None = None
        self._on_end: Callable[[], None] | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def arrived_ns(self) -> int:
        """When the latest bytes came off the socket (``time.perf_counter_ns()``; 0 unless the
        client stamps arrivals)."""
        return self._connection.arrived_ns

    def header(self, name: bytes) -> bytes | None:
        """The value of a response header (``name`` in lower case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    async def read(self) -> bytes:
        """The body bytes that arrived since the last call; waits for some; ``b""`` at the end."""
        while True:
            pieces = self._pieces
            if pieces:
                self._pieces = []
                self.buffered_bytes = 0
                self._connection.drained()
                return pieces[0] if len(pieces) == 1 else b"".join(pieces)
            if self._error is not None:
                raise self._error
            if self.complete:
                return b""
            await self._woken()

    async def _woken(self) -> None:
        """Until a piece, the end, a failure or ``wake()``."""
        waiter = self._loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def pipe(self, sink: Callable[[bytes], None], on_end: Callable[[], None]) -> None:
        """From now on hand every piece to ``sink`` as it arrives, in the connection's own
        ``data_received`` (no task is woken for it), and call ``on_end`` when the answer is
        complete, in the same turn as its last bytes. What arrived before is handed over now.
        ``wait()`` tells the pipe's owner how it ended. An exception from the sink or ``on_end``
        stops the pipe and is raised by ``wait()``."""
        self._sink = sink
        self._on_end = on_end
        pieces, self._pieces = self._pieces, []
        self.buffered_bytes = 0
        for piece in pieces:
            self._to_sink(piece)
        if self.complete:
            self._end_pipe()

    async def wait(self) -> None:
        """Until the piped answer has ended or ``wake()`` is called; raises what broke it."""
        if self._error is None and not self.complete:
            await self._woken()
        if self._error is not None:
            raise self._error

    def wake(self) -> None:
        """Make ``wait()`` return (the pipe's owner has something to do, e.g. drain the client)."""
        self._wake()

    def pause_reading(self) -> None:
        """Read nothing more from the server until ``resume_reading()`` (the reader is slow)."""
        self._connection.pause()

    def resume_reading(self) -> None:
        self._connection.drained()

    async def read_all(self) -> bytes:
        pieces = []
        while piece := await self.read():
            pieces.append(piece)
        return b"".join(pieces)

    def release(self) -> None:
        """Done with it: the connection goes back to the pool when the answer was read whole."""
        if self._released:
            return
        self._released = True
        connection = self._connection
        connection.finished()
        if self.complete and self.keep_alive and self._error is None and not connection.closed:
            connection._client._idle(connection)
        else:
            connection.close()

    def close(self) -> None:
        """Abort: close the connection (vLLM and SGLang stop generating when it closes)."""
        if self._released:
            return
        self._released = True
        self._connection.finished()
        self._connection.close()

    # -- fed by the connection ---------------------------------------------------------------------

    async def _wait_head(self) -> None:
        await self._head

    def _begin(self, status: int, headers: list[tuple[bytes, bytes]], *, until_close: bool) -> None:
        self.status = status
        self.headers = headers
        self.until_close = until_close
        if not self._head.done():
            self._head.set_result(None)

    def _add(self, body: bytes) -> None:
        if self._sink is not None:
            self._to_sink(body)
            return
        self._pieces.append(body)
        self.buffered_bytes += len(body)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _finish(self) -> None:
        self.complete = True
        if self._on_end is not None:
            self._end_pipe()
        self._wake()

    def _to_sink(self, piece: bytes) -> None:
        sink = self._sink
        if sink is None or self._error is not None:
            return
        try:
            sink(piece)
        except Exception as error:  # a bug of the relay: wait() raises it in the relay's task
            self._sink = self._on_end = None
            self._error = error
            self._wake()

    def _end_pipe(self) -> None:
        on_end = self._on_end
        self._sink = self._on_end = None
        if on_end is None or self._error is not None:
            return
        try:
            on_end()
        except Exception as error:
            self._error = error

    def _fail(self, error: Exception) -> None:
        if self.complete:
            return
        self._error = error
        self._sink = self._on_end = None
        if not self._head.done():
            self._head.set_exception(error)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Http1Client:
    """Keep-alive connections to every server asked, and the stall watchdog.

    ``peer`` names the other side in error messages ("the engine sent nothing for 30 s");
    ``stamp_arrivals`` times each read (``Http1Response.arrived_ns``).
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        keepalive_expiry_s: float,
        peer: str = "server",
        stamp_arrivals: bool = False,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.keepalive_expiry_s = keepalive_expiry_s
        self.peer = peer
        self.stamp_arrivals = stamp_arrivals
        self._idle_connections: dict[_Address, list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._addresses: dict[str, tuple[_Address, bytes]] = {}
        self._tls: ssl.SSLContext | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self.loop_time = time.monotonic
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the client runs in (set by ``start()``)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def start(self) -> None:
        """Start the stall watchdog (call inside the running event loop)."""
        loop = self._loop = asyncio.get_running_loop()
        self.loop_time = loop.time
        if self._watchdog is None:
            self._watchdog = loop.create_task(self._watch(), name=f"{self.peer}-stall-watchdog")

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
            self._watchdog = None
        for connection in list(self._open):
            connection.close()
        self._open.clear()
        self._idle_connections.clear()

    def open_connections(self) -> int:
        return len(self._open)

    async def post(
        self,
        base_url: str,
        path: str,
        headers: Sequence[tuple[bytes, bytes]],
        body: bytes,
        *,
        fresh: bool = False,
    ) -> Http1Response:
        """Send ``POST path`` and wait for the answer to begin (its status and headers).

        ``base_url`` is ``http://host:port`` or ``https://...`` (a path in it is not used).
        ``fresh`` skips idle connections. Raises ``ServerUnreachable`` (nothing was sent),
        ``ClosedBeforeAnswer`` (closed before any byte of an answer) or ``AnswerBroken``.
        """
        return await self._send(b"POST", base_url, path, headers, body, fresh=fresh)

    async def get(
        self, base_url: str, path: str, headers: Sequence[tuple[bytes, bytes]], *, fresh: bool = False
    ) -> Http1Response:
        """Send ``GET path`` (no body) and wait for the answer to begin; as ``post`` otherwise."""
        return await self._send(b"GET", base_url, path, headers, None, fresh=fresh)

    async def _send(
        self,
        method: bytes,
        base_url: str,
        path: str,
        headers: Sequence[tuple[bytes, bytes]],
        body: bytes | None,
        *,
        fresh: bool,
    ) -> Http1Response:
        address, host = self._address(base_url)
        connection = None if fresh else self._take_idle(address)
        if connection is None:
            connection = await self._connect(address)
        response = Http1Response(connection)
        head = [method, b" ", path.encode(), b" HTTP/1.1\r\nhost: ", host, b"\r\n"]
        for name, value in headers:
            head += (name, b": ", value, b"\r\n")
        if body is None:
            head.append(b"\r\n")
        else:
            head += (b"content-length: ", str(len(body)).encode(), b"\r\n\r\n")
        connection.send((b"".join(head), body or b""), response)
        try:
            await response._wait_head()
        except BaseException:
            response.close()
            raise
        return response

    def _address(self, base_url: str) -> tuple[_Address, bytes]:
        known = self._addresses.get(base_url)
        if known is None:
            parts = urlsplit(base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ServerUnreachable(f"{self.peer} address {base_url!r} is not an http:// or https:// URL")
            secure = parts.scheme == "https"
            port = parts.port or (443 if secure else 80)
            known = ((parts.hostname, port, secure), parts.netloc.encode())
            self._addresses[base_url] = known
        return known

    def _take_idle(self, address: _Address) -> _Connection | None:
        idle = self._idle_connections.get(address)
        now = self.loop_time()
        while idle:
            connection = idle.pop()
            if not connection.closed and now - connection.idle_since < self.keepalive_expiry_s:
                return connection
            connection.close()
        return None

    async def _connect(self, address: _Address) -> _Connection:
        loop = self.loop
        host, port, secure = address
        if secure and self._tls is None:
            self._tls = ssl.create_default_context()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, protocol = await loop.create_connection(
                    lambda: _Connection(self, address), host, port, ssl=self._tls if secure else None
                )
        except TimeoutError as error:
            raise ServerUnreachable(f"connecting took more than {self.connect_timeout_s:g} s") from error
        except OSError as error:
            raise ServerUnreachable(error.strerror or type(error).__name__) from error
        self._open.add(protocol)
        return protocol

    def _idle(self, connection: _Connection) -> None:
        connection.idle_since = self.loop_time()
        self._idle_connections.setdefault(connection.address, []).append(connection)

    def _forget(self, connection: _Connection) -> None:
        self._open.discard(connection)

    async def _watch(self) -> None:
        interval_s = min(1.0, self.read_timeout_s / 4)
        while True:
            await asyncio.sleep(interval_s)
            now = self.loop_time()
            for connection in list(self._open):
                if connection.response is not None:
                    if now - connection.last_activity > self.read_timeout_s:
                        connection.stalled(self.read_timeout_s)
                elif now - connection.idle_since > self.keepalive_expiry_s:
                    connection.close()
