"""The HTTP/1.1 client of the gateway and the bench (``modelyard/http_client.py``): its
keep-alive connections against a raw TCP server that misbehaves on purpose."""

from __future__ import annotations

import asyncio
import contextlib

from modelyard.bench.client import BenchClient, probe
from modelyard.bench.records import RequestRecord
from modelyard.http_client import Http1Client

ANSWER = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"


def _client() -> Http1Client:
    client = Http1Client(connect_timeout_s=5, read_timeout_s=5, keepalive_expiry_s=30, stamp_arrivals=True)
    client.start()
    return client


async def _ask(client: Http1Client, port: int) -> tuple[int, bytes]:
    response = await client.post(f"http://127.0.0.1:{port}", "/v1/chat/completions", [], b"{}")
    try:
        body = await response.read_all()
        assert response.arrived_ns > 0
        return response.status, body
    finally:
        response.release()


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


async def _until_closed_by_the_server(client: Http1Client) -> None:
    """Until the client has seen the server close its idle connection: turns of the event loop
    (no timer), each handling what the sockets reported."""
    async with asyncio.timeout(10):
        while client.open_connections():
            await asyncio.sleep(0)


async def test_keep_alive_reuses_one_connection() -> None:
    server, connections = await _serve(close_after_answer=False)
    port = server.sockets[0].getsockname()[1]
    client = _client()
    try:
        for _ in range(3):
            assert await _ask(client, port) == (200, b"hello")
    finally:
        await client.close()
        server.close()
    assert len(connections) == 1


async def test_an_idle_connection_the_server_closed_is_replaced() -> None:
    server, connections = await _serve(close_after_answer=True)
    port = server.sockets[0].getsockname()[1]
    client = _client()
    try:
        assert await _ask(client, port) == (200, b"hello")
        await _until_closed_by_the_server(client)
        assert await _ask(client, port) == (200, b"hello")
    finally:
        await client.close()
        server.close()
    assert len(connections) == 2


STREAM_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    b"%x\r\n%s\r\n0\r\n\r\n"
)
EVENTS = b'data: {"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


async def test_the_bench_sends_again_on_a_new_connection_when_a_kept_one_closes_unanswered() -> None:
    """The server answers once per connection, then closes it on the next request without a byte
    (as a server whose keep-alive timer fired just then): the bench's request goes again, once."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        await reader.readuntil(b"\r\n\r\n{}")
        writer.write(STREAM_ANSWER % (len(EVENTS), EVENTS))
        await writer.drain()
        with contextlib.suppress(asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n{}")
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    records = [
        RequestRecord(request_index=i, prompt_id=f"p{i}", scheduled_send_ns=0, actual_send_ns=0)
        for i in range(2)
    ]
    try:
        async with BenchClient(f"http://127.0.0.1:{port}", api_key=None) as client:
            texts = [await client.send(record, b"{}", origin_ns=0, keep_text=True) for record in records]
    finally:
        server.close()
    assert texts == ["hi", "hi"]
    assert [record.error for record in records] == [None, None]
    assert [record.finish_reason for record in records] == ["stop", "stop"]
    assert len(connections) == 2


async def _answer_once(answer: bytes | None) -> tuple[asyncio.Server, list[bytes]]:
    """Reads one request head, then sends ``answer`` and closes (None: never answers)."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        if answer is None:
            with contextlib.suppress(asyncio.IncompleteReadError):
                await reader.readuntil(b"never")
        else:
            writer.write(answer)
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), heads


async def test_the_bench_probe_gets_a_json_document_with_the_key_and_no_body() -> None:
    document = b'{"data": [{"id": "chat", "owned_by": "vllm"}]}'
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
    server, heads = await _answer_once(answer % (len(document), document))
    port = server.sockets[0].getsockname()[1]
    try:
        found = await probe(f"http://127.0.0.1:{port}/v1/models?full=1", api_key="secret-key")
    finally:
        server.close()
    assert found == (200, {"data": [{"id": "chat", "owned_by": "vllm"}]})
    [head] = heads
    assert head.startswith(b"GET /v1/models?full=1 HTTP/1.1\r\n")
    assert b"authorization: Bearer secret-key\r\n" in head and b"content-length" not in head


async def test_the_bench_probe_gives_the_status_of_an_answer_that_is_not_json() -> None:
    server, _ = await _answer_once(b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\n\r\nnot found")
    port = server.sockets[0].getsockname()[1]
    try:
        assert await probe(f"http://127.0.0.1:{port}/version") == (404, None)
    finally:
        server.close()


async def test_the_bench_probe_of_a_server_that_does_not_answer_is_none() -> None:
    silent, _ = await _answer_once(None)
    port = silent.sockets[0].getsockname()[1]
    try:
        assert await probe(f"http://127.0.0.1:{port}/version", timeout_s=0.2) is None
    finally:
        silent.close()
    assert await probe(f"http://127.0.0.1:{port}/version") is None  # nothing listens there now
