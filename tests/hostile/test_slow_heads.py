"""Slow request heads: a client that sends its head a byte at a time is closed after the header
timeout, and past the cap on slow connections new slow ones are closed, while clients that send
their request at once are served. Both on the main process's port (no gateway workers) and on a
gateway worker's."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from modelyard.testing.http_clients import shared_tls_context

from .conftest import HostileTarget, start_server, stop_server

HEADER_TIMEOUT_S = 5
MAX_SLOW_CONNECTIONS = 4
# Far past the header timeout: a connection still open then was not closed by it.
GIVE_UP_S = 40.0
PARTIAL_HEAD = b"GET /api/v1/system HTTP/1.1\r\nHost: x\r\n"


@pytest.fixture(scope="module", params=[0, 1], ids=["main-process", "gateway-worker"])
def slow_target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostileTarget]:
    folder = tmp_path_factory.mktemp("slow-heads")
    environment = {
        "MODELYARD_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "MODELYARD_MAX_SLOW_CONNECTIONS": str(MAX_SLOW_CONNECTIONS),
    }
    server = start_server(
        folder / "data", folder / "serve.log", environment, ("--gateway-workers", str(request.param))
    )
    try:
        yield server
    finally:
        stop_server(server)


def _dribble_until_closed(connection: socket.socket, head: bytes) -> bytes:
    """Send ``head`` a byte every tenth of a second until the server answers or closes; what it sent."""
    given_up = time.monotonic() + GIVE_UP_S
    for byte in head:
        readable, _, _ = select.select([connection], [], [], 0.1)
        if readable or time.monotonic() > given_up:
            break
        try:
            connection.send(bytes([byte]))
        except OSError:
            break
    return _read_until_closed(connection)


def _read_until_closed(connection: socket.socket) -> bytes:
    """What the server sends until it closes; a connection still open past the socket's timeout
    fails the test (TimeoutError)."""
    answer = b""
    try:
        while chunk := connection.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass
    return answer


def _read_answer(connection: socket.socket) -> bytes:
    """One whole answer, with a ``Content-Length`` or chunked, from a connection kept open."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += _received(connection)
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next((int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:")), None)
    while (len(body) < length) if length is not None else not body.endswith(b"\r\n0\r\n\r\n"):
        body += _received(connection)
    return head + b"\r\n\r\n" + body


def _received(connection: socket.socket) -> bytes:
    chunk = connection.recv(65536)
    assert chunk, "the server closed the connection before its answer was complete"
    return chunk


def test_a_head_sent_a_byte_at_a_time_is_closed_after_the_header_timeout(slow_target: HostileTarget) -> None:
    answers: list[int] = []
    done = threading.Event()

    def meanwhile() -> None:
        with slow_target.client() as client:
            while not done.is_set():
                answers.append(client.get("/api/v1/system").status_code)
                done.wait(0.5)

    other = threading.Thread(target=meanwhile)
    other.start()
    try:
        with socket.create_connection(("127.0.0.1", slow_target.port), timeout=GIVE_UP_S) as connection:
            answer = _dribble_until_closed(connection, PARTIAL_HEAD + b"X-Slow: " + b"a" * 4000)
    finally:
        done.set()
        other.join(timeout=60)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b'"code": "header_timeout"' in answer
    assert b"MODELYARD_HEADER_TIMEOUT_S" in answer
    # The client beside it was served all along (it sent no credentials).
    assert answers and set(answers) == {401}


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(
    slow_target: HostileTarget,
) -> None:
    with socket.create_connection(("127.0.0.1", slow_target.port), timeout=GIVE_UP_S) as connection:
        assert _read_until_closed(connection) == b""


def test_a_kept_alive_connection_is_closed_when_its_next_head_does_not_come(
    slow_target: HostileTarget,
) -> None:
    with socket.create_connection(("127.0.0.1", slow_target.port), timeout=GIVE_UP_S) as connection:
        connection.sendall(PARTIAL_HEAD + b"\r\n")
        first = _read_answer(connection)
        assert first.startswith(b"HTTP/1.1 401 "), first[:200]
        # uvicorn's keep-alive timer stops at the first byte; the head timeout does not.
        answer = _dribble_until_closed(connection, PARTIAL_HEAD + b"X-Slow: " + b"a" * 4000)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def test_past_the_cap_new_slow_connections_are_closed_and_fast_ones_served(
    slow_target: HostileTarget,
) -> None:
    connections = [
        socket.create_connection(("127.0.0.1", slow_target.port), timeout=GIVE_UP_S)
        for _ in range(MAX_SLOW_CONNECTIONS + 1)
    ]
    try:
        for connection in connections:
            connection.sendall(PARTIAL_HEAD)
        # One of them came past the cap: it is closed after a second, the others are kept.
        readable, _, _ = select.select(connections, [], [], GIVE_UP_S)
        assert len(readable) == 1, "no slow connection was closed"
        assert _read_until_closed(readable[0]).startswith(b"HTTP/1.1 408 ")
        held = [connection for connection in connections if connection is not readable[0]]
        # A client that sends its request at once is served while the cap is full.
        with httpx.Client(base_url=slow_target.url, timeout=60, verify=shared_tls_context()) as client:
            assert client.get("/api/v1/system").status_code == 401
        # The slow ones under the cap were held: they finish their heads and are answered.
        for connection in held:
            connection.sendall(b"\r\n")
        for connection in held:
            assert connection.recv(65536).startswith(b"HTTP/1.1 401 ")
    finally:
        for connection in connections:
            connection.close()
