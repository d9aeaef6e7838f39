"""The bytes a client gets on its connection, whichever way the gateway writes them.

Under uvicorn's httptools server (the gateway's own) answers are written straight onto the
connection (``client_out.py``); under any other server, or when the check of uvicorn's private
names failed at start (here: a stand-in cycle class without an attribute the writer needs),
through ASGI ``send()``. Every way must give a client the same HTTP/1.1: framing an HTTP
parser accepts, keep-alive across answers of every kind, ``Connection: close`` honoured, every
event of a long stream to a slow reader. The client here is h11 over a plain socket, so a
framing mistake fails the test instead of being forgiven.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import h11
import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from modelyard.server.context import ServerContext
from modelyard.server.gateway.client_out import TESTED_UVICORN, DirectWriting
from modelyard.settings import Settings
from modelyard.store.database import Database

from .conftest import (
    GatewayHarness,
    ReferenceServers,
    data_events,
    engine_gauge,
    unique_name,
    wait_until_replica_is_free,
)


@pytest.fixture(scope="module")
def asgi_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHarness]:
    """The gateway on uvicorn's h11 server: every answer goes through ASGI ``send()``."""
    data_dir = tmp_path_factory.mktemp("asgi-gateway")
    database = Database.open("sqlite:///" + str(data_dir / "modelyard.db"))
    harness = GatewayHarness(
        database=database,
        context=ServerContext(settings=Settings(data_dir=data_dir, deploy_demo=False), database=database),
        http="h11",
    )
    harness.start()
    yield harness
    harness.stop()
    database.close()


class CycleWithoutMessageEvent(RequestResponseCycle):
    """A stand-in for a uvicorn whose cycle no longer has ``message_event``."""

    def __init__(self, *arguments: Any, **keywords: Any) -> None:
        super().__init__(*arguments, **keywords)
        del self.message_event


@pytest.fixture(scope="module")
def fallback_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHarness]:
    """The gateway on the server's own protocol, whose check of uvicorn's names failed."""
    data_dir = tmp_path_factory.mktemp("fallback-gateway")
    database = Database.open("sqlite:///" + str(data_dir / "modelyard.db"))
    harness = GatewayHarness(
        database=database,
        context=ServerContext(settings=Settings(data_dir=data_dir, deploy_demo=False), database=database),
        direct_writing=DirectWriting(CycleWithoutMessageEvent),
    )
    harness.start()
    yield harness
    harness.stop()
    database.close()


@pytest.fixture(params=["direct", "asgi", "fallback"])
def served(request: pytest.FixtureRequest, gateway: GatewayHarness) -> GatewayHarness:
    if request.param == "direct":
        return gateway
    harness: GatewayHarness = request.getfixturevalue(f"{request.param}_gateway")
    return harness


def test_the_installed_uvicorn_has_every_private_name_the_direct_writer_needs() -> None:
    writing = DirectWriting()
    assert writing.problem is None and writing.enabled
    installed = Version(importlib.metadata.version("uvicorn"))
    assert installed in SpecifierSet(TESTED_UVICORN), (
        f"uvicorn {installed} is outside the window client_out.py was read against ({TESTED_UVICORN}): "
        "read its httptools_impl.py, then move TESTED_UVICORN and pyproject.toml's pin"
    )


def test_a_uvicorn_whose_cycle_lost_an_attribute_gets_plain_asgi_and_one_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="modelyard.server.gateway.client_out"):
        writing = DirectWriting(CycleWithoutMessageEvent)
    assert not writing.enabled
    [warning] = [record.getMessage() for record in caplog.records]
    assert "CycleWithoutMessageEvent has no message_event" in warning
    assert "ASGI send()" in warning and TESTED_UVICORN in warning


class RawClient:
    """One HTTP/1.1 connection, parsed strictly by h11."""

    def __init__(self, base_url: str, *, receive_buffer: int | None = None) -> None:
        host, port = base_url.removeprefix("http://").split(":")
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:  # a small window: the gateway's writes back up
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(30)
        self.sock.connect((host, int(port)))
        self.connection = h11.Connection(h11.CLIENT)

    def post(
        self, path: str, key: str, body: dict[str, Any], *, close: bool = False
    ) -> tuple[h11.Response, bytes]:
        if self.connection.our_state is h11.DONE:
            self.connection.start_next_cycle()
        payload = json.dumps(body).encode()
        headers = [
            ("host", "gateway"),
            ("authorization", f"Bearer {key}"),
            ("content-type", "application/json"),
            ("content-length", str(len(payload))),
        ]
        if close:
            headers.append(("connection", "close"))
        self.sock.sendall(self.connection.send(h11.Request(method="POST", target=path, headers=headers)))
        self.sock.sendall(self.connection.send(h11.Data(data=payload)))
        self.sock.sendall(self.connection.send(h11.EndOfMessage()))
        response: h11.Response | None = None
        body_bytes = bytearray()
        while True:
            event = self.connection.next_event()
            if event is h11.NEED_DATA:
                self.connection.receive_data(self.sock.recv(1024))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                body_bytes += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert response is not None
                return response, bytes(body_bytes)

    def closed_by_server(self) -> bool:
        return self.sock.recv(1) == b""

    def close(self) -> None:
        self.sock.close()


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def _header(response: h11.Response, name: bytes) -> bytes | None:
    return next((value for key, value in response.headers if key == name), None)


def test_answers_of_every_kind_share_one_kept_alive_connection(
    served: GatewayHarness, engines: ReferenceServers
) -> None:
    deployment = unique_name("keepalive")
    served.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    key = served.create_key(unique_name("keepalive-key"))
    raw = RawClient(served.base_url)
    try:
        streamed, events = raw.post("/v1/chat/completions", key, _chat(deployment, stream=True))
        whole, body = raw.post("/v1/chat/completions", key, _chat(deployment))
        missing, error = raw.post("/v1/chat/completions", key, _chat("no-such-model", stream=True))
        again, events_again = raw.post(
            "/v1/chat/completions", key, {**_chat(deployment, stream=True), "max_tokens": 1}
        )
    finally:
        raw.close()
    assert streamed.status_code == 200 and again.status_code == 200
    assert _header(streamed, b"transfer-encoding") == b"chunked"
    assert _header(streamed, b"x-request-id")
    assert data_events(events)[-1] == b"[DONE]"
    contents = [json.loads(event)["model"] for event in data_events(events)[:-1]]
    assert contents and set(contents) == {deployment}
    assert whole.status_code == 200
    assert json.loads(body)["model"] == deployment
    assert _header(whole, b"content-length") == str(len(body)).encode()
    assert missing.status_code == 404
    assert json.loads(error)["error"]["code"] == "model_not_found"
    assert data_events(events_again)[-1] == b"[DONE]"


def test_a_client_that_asks_to_close_gets_its_whole_answer_then_the_close(
    served: GatewayHarness, engines: ReferenceServers
) -> None:
    deployment = unique_name("close")
    served.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    key = served.create_key(unique_name("close-key"))
    raw = RawClient(served.base_url)
    try:
        response, events = raw.post("/v1/chat/completions", key, _chat(deployment, stream=True), close=True)
        assert response.status_code == 200
        assert _header(response, b"connection") == b"close"
        assert data_events(events)[-1] == b"[DONE]"
        assert raw.closed_by_server()
    finally:
        raw.close()


def test_a_slow_reader_gets_every_event_of_a_long_stream_in_order(
    served: GatewayHarness, engines: ReferenceServers
) -> None:
    deployment = unique_name("slow-reader")
    served.publish(deployment, [engines.get("long", output_tokens=3000, served_model_names=["vllm-model"])])
    key = served.create_key(unique_name("slow-reader-key"))
    raw = RawClient(served.base_url, receive_buffer=4096)
    try:
        response, body = raw.post(
            "/v1/chat/completions", key, _chat(deployment, stream=True, max_tokens=3000)
        )
    finally:
        raw.close()
    assert response.status_code == 200
    events = data_events(body)
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert not any("error" in chunk for chunk in chunks)
    finished = [chunk for chunk in chunks if chunk["choices"] and chunk["choices"][0]["finish_reason"]]
    assert len(finished) == 1
    contents = [chunk["choices"][0]["delta"].get("content") for chunk in chunks if chunk["choices"]]
    assert len([text for text in contents if text]) == 3000


def test_a_client_that_leaves_mid_stream_stops_the_engines_answer(
    served: GatewayHarness, engines: ReferenceServers
) -> None:
    server = engines.get("slow-leave-raw", itl_ms=200.0, served_model_names=["slow-model"])
    deployment = unique_name("leave-raw")
    served.publish(deployment, [server])
    key = served.create_key(unique_name("leave-raw-key"))
    raw = RawClient(served.base_url)
    payload = json.dumps(_chat(deployment, stream=True, max_tokens=50)).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {key}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
    ).encode()
    try:
        raw.sock.sendall(head + payload)
        received = b""
        while b"data: " not in received:  # the answer has begun: the engine is generating
            received += raw.sock.recv(4096)
        assert served.outstanding(server.base_url) == 1
    finally:
        raw.close()  # 50 tokens at 200 ms: 10 s more if nobody stopped the engine
    wait_until_replica_is_free(served, server)
    assert served.outstanding(server.base_url) == 0
    assert engine_gauge(server, "num_requests_running") == 0
    assert [row.status_code for row in served.usage_rows(deployment)] == [499]
