"""Bounds at the door: oversized heads and bodies are refused before any work is done for them."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator

import httpx

from .conftest import HostileTarget

MIB = 1024 * 1024


def _error(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), response.text
    error: dict[str, object] = body["error"]
    return error


def _send_head_until_answered(target: HostileTarget, head: bytes, filler_bytes: int) -> bytes:
    """Send ``head`` then ``filler_bytes`` of one header value, stopping as soon as the server answers."""
    piece = b"a" * (64 * 1024)
    answer = b""
    with socket.create_connection(("127.0.0.1", target.port), timeout=60) as connection:
        connection.sendall(head)
        sent = 0
        try:
            while sent < filler_bytes:
                readable, _, _ = select.select([connection], [], [], 0)
                if readable:
                    break
                connection.sendall(piece)
                sent += len(piece)
        except OSError:
            pass  # the server closed the connection: its answer is already in our buffer
        try:
            while chunk := connection.recv(65536):
                answer += chunk
        except OSError:
            pass
    return answer


def test_a_64_mib_header_is_refused_with_431_after_64_kib_and_others_are_served(
    target: HostileTarget,
) -> None:
    rss_before = target.rss_bytes()
    answers: list[int] = []

    def meanwhile() -> None:
        with target.client() as client:
            answers.append(client.get("/api/v1/system").status_code)

    other = threading.Thread(target=meanwhile)
    other.start()
    answer = _send_head_until_answered(target, b"GET /api/v1/system HTTP/1.1\r\nHost: x\r\nX-Big: ", 64 * MIB)
    other.join(timeout=60)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b'"code": "headers_too_large"' in answer
    assert b"64 KiB" in answer and b"MODELYARD_MAX_HEADER_BYTES" in answer
    assert answers == [401]  # the other client was answered (it sent no credentials)
    assert target.rss_bytes() - rss_before < 16 * MIB


def test_more_headers_than_the_limit_are_refused_with_431(target: HostileTarget) -> None:
    headers = b"".join(b"X-Header-%d: 1\r\n" % index for index in range(150))
    with socket.create_connection(("127.0.0.1", target.port), timeout=60) as connection:
        connection.sendall(b"GET /api/v1/system HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
        answer = connection.recv(65536)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"151 headers; at most 100" in answer


def test_an_unauthenticated_50_mb_body_is_refused_before_it_is_read(target: HostileTarget) -> None:
    rss_before = target.rss_bytes()
    with target.client() as client:
        response = client.post("/api/v1/models", content=b"x" * (50 * MIB))
        # The connection stays usable: the server dropped the rest of the body, not the client.
        after = client.get("/api/v1/system")
    assert response.status_code == 413
    error = _error(response)
    assert error["code"] == "body_too_large"
    assert "at most 1 MiB" in str(error["message"])
    assert "MODELYARD_MAX_API_BODY_BYTES" in str(error["hint"])
    assert after.status_code == 401
    assert target.rss_bytes() - rss_before < 16 * MIB


def test_a_gateway_body_over_its_limit_is_refused_before_the_key_is_checked(target: HostileTarget) -> None:
    with target.client() as client:
        response = client.post(
            "/v1/chat/completions", content=b"x" * (33 * MIB), headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 413
    assert "at most 32 MiB" in str(_error(response)["message"])


def test_a_chunked_body_is_refused_once_it_passes_the_limit(target: HostileTarget) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(3):
            yield b"x" * MIB

    with target.client(admin=True) as client:
        response = client.post("/api/v1/models", content=chunks())
    assert response.status_code == 413
    assert _error(response)["code"] == "body_too_large"


def test_json_nested_1000_deep_on_the_rest_api_is_a_400_naming_the_limit(target: HostileTarget) -> None:
    body = b'{"name": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    with target.client(admin=True) as client:
        response = client.post("/api/v1/keys", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == "json_too_deep"
    assert "deeper than 64 levels" in str(error["message"])


def test_json_nested_1000_deep_on_the_gateway_is_an_openai_shaped_400(target: HostileTarget) -> None:
    key = target.create_key("hostile-depth")
    body = b'{"model": "x", "messages": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    with target.client() as client:
        response = client.post(
            "/v1/chat/completions",
            content=body,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
    assert response.status_code == 400
    error = _error(response)
    assert error["code"] == "invalid_json"
    assert error["type"] == "invalid_request_error"
    assert "deeper than 64 levels" in str(error["message"])


def _send_body_until_answered(target: HostileTarget, head: bytes, body: bytes) -> bytes:
    """Send ``head`` and as much of ``body`` as the server takes before it answers; its answer."""
    with socket.create_connection(("127.0.0.1", target.port), timeout=60) as connection:
        connection.sendall(head)
        view = memoryview(body)
        try:
            while view:
                readable, _, _ = select.select([connection], [], [], 0)
                if readable:
                    break
                view = view[connection.send(view[: 64 * 1024]) :]
        except OSError:
            pass
        return _read_response(connection)


def _read_response(connection: socket.socket) -> bytes:
    """One whole response (its head and its ``Content-Length`` of body) from ``connection``."""
    answer = b""
    while b"\r\n\r\n" not in answer and (chunk := connection.recv(65536)):
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next((int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:")), 0)
    while len(body) < length and (chunk := connection.recv(65536)):
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_deep_body_is_refused_before_it_is_all_sent_and_others_are_served(target: HostileTarget) -> None:
    # 1 MiB declared, half of it sent: the nesting is refused from what came, unauthenticated.
    body = b'{"name": ' + b"[" * (512 * 1024)
    head = b"POST /api/v1/keys HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += b"Content-Length: %d\r\n\r\n" % MIB
    answers: list[int] = []

    def meanwhile() -> None:
        with target.client() as client:
            answers.append(client.get("/api/v1/system").status_code)

    other = threading.Thread(target=meanwhile)
    other.start()
    answer = _send_body_until_answered(target, head, body)
    other.join(timeout=60)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b'"code": "json_too_deep"' in answer
    assert b"deeper than 64 levels" in answer and b"MODELYARD_MAX_JSON_DEPTH" in answer
    assert answers == [401]


def test_a_deep_8_mib_gateway_body_is_refused_before_it_is_all_sent(target: HostileTarget) -> None:
    key = target.create_key("hostile-deep-stream")
    body = b'{"model": "x", "messages": ' + b"[" * (4 * MIB)
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: %d\r\n\r\n" % (8 * MIB)
    answer = _send_body_until_answered(target, head, body)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert b'"code":"invalid_json"' in answer.replace(b" ", b"")
    assert b"deeper than 64 levels" in answer
