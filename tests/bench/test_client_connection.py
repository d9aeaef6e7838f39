"""The client's keep-alive connections against a raw TCP server that misbehaves on purpose."""

from __future__ import annotations

import asyncio

from modelyard.bench.connection import ConnectionPool

ANSWER = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\n{}"


class _Sink:
    def __init__(self) -> None:
        self.status = 0
        self.body = b""

    def on_status(self, status: int) -> None:
        self.status = status

    def on_body(self, data: bytes, arrived_ns: int) -> None:
        self.body += data


async def _serve(close_after_answer: bool) -> tuple[asyncio.Server, list[int]]:
    """Answers each request once; with ``close_after_answer`` it then closes the idle connection."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n{}")
                writer.write(ANSWER)
                await writer.drain()
                if close_after_answer:
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, connections


async def test_keep_alive_reuses_one_connection() -> None:
    server, connections = await _serve(close_after_answer=False)
    port = server.sockets[0].getsockname()[1]
    pool = ConnectionPool(f"http://127.0.0.1:{port}")
    try:
        for _ in range(3):
            sink = _Sink()
            await pool.request(REQUEST, sink, timeout_s=5)
            assert (sink.status, sink.body) == (200, b"hello")
    finally:
        await pool.close()
        server.close()
    assert len(connections) == 1


async def test_an_idle_connection_the_server_closed_is_replaced() -> None:
    server, connections = await _serve(close_after_answer=True)
    port = server.sockets[0].getsockname()[1]
    pool = ConnectionPool(f"http://127.0.0.1:{port}")
    try:
        await pool.request(REQUEST, _Sink(), timeout_s=5)
        await asyncio.sleep(0.05)  # let the close arrive while the connection is idle
        sink = _Sink()
        await pool.request(REQUEST, sink, timeout_s=5)
        assert (sink.status, sink.body) == (200, b"hello")
    finally:
        await pool.close()
        server.close()
    assert len(connections) == 2
