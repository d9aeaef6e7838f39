"""Answers through the gateway: streamed event by event, normalised, metered."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import openai
import pytest

from modelyard.testing.http_clients import shared_tls_context

from .conftest import (
    GatewayHarness,
    ReferenceServers,
    data_events,
    engine_counter,
    engine_gauge,
    unique_name,
    wait_until_replica_is_free,
)


def client(gateway: GatewayHarness, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)


def stream_raw(gateway: GatewayHarness, key: str, body: dict[str, Any]) -> bytes:
    with httpx.stream(
        "POST",
        gateway.base_url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={**body, "stream": True},
        timeout=30,
        verify=shared_tls_context(),
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return response.read()


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "say three words"}], **extra}


def test_chat_answers_streamed_and_not_through_the_openai_client(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("chat")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    openai_client = client(gateway, api_key)
    whole = openai_client.chat.completions.create(
        model=deployment, messages=[{"role": "user", "content": "hi"}]
    )
    assert whole.model == deployment
    assert whole.choices[0].message.content
    pieces = list(
        openai_client.chat.completions.create(
            model=deployment, messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert "".join(piece.choices[0].delta.content or "" for piece in pieces if piece.choices)
    assert all(piece.model == deployment for piece in pieces)


def test_completions_and_embeddings_pass_through(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("all-paths")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    openai_client = client(gateway, api_key)
    completion = openai_client.completions.create(model=deployment, prompt="one two", max_tokens=3)
    assert completion.usage is not None and completion.usage.completion_tokens == 3
    embedding = openai_client.embeddings.create(model=deployment, input="one two three")
    assert len(embedding.data[0].embedding) == 16
    rows = gateway.usage_rows(deployment)
    assert [(row.endpoint, row.prompt_tokens, row.completion_tokens) for row in rows] == [
        ("/v1/completions", 2, 3),
        ("/v1/embeddings", 3, 0),
    ]


def test_the_first_event_reaches_the_client_before_the_engine_sends_the_last(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    # Token j leaves the engine at j * 300 ms: the whole answer takes 900 ms to produce.
    server = engines.get("slow-a", itl_ms=300.0, served_model_names=["slow-model"])
    deployment = unique_name("slow")
    gateway.publish(deployment, [server])
    tokens_before = engine_counter(server, "generation_tokens")
    produced_at_first_event: float | None = None
    contents = []
    with client(gateway, api_key).chat.completions.create(
        model=deployment, messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=4
    ) as stream:
        for piece in stream:
            if piece.choices and piece.choices[0].delta.content and produced_at_first_event is None:
                produced_at_first_event = engine_counter(server, "generation_tokens") - tokens_before
            if piece.choices:
                contents.append(piece.choices[0].delta.content or "")
    assert produced_at_first_event is not None
    assert produced_at_first_event < 4, "the gateway held the stream until the engine had finished"
    assert engine_counter(server, "generation_tokens") - tokens_before == 4
    assert len([text for text in contents if text]) == 4


def test_usage_is_metered_per_key_and_deployment_and_not_forced_on_the_client(
    gateway: GatewayHarness, engines: ReferenceServers
) -> None:
    deployment = unique_name("metered")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    key = gateway.create_key()
    raw = stream_raw(gateway, key, chat(deployment, max_tokens=4))
    payloads = [json.loads(event) for event in data_events(raw) if event != b"[DONE]"]
    assert all(payload["choices"] for payload in payloads), "a usage-only chunk the client did not ask for"
    client(gateway, key).chat.completions.create(
        model=deployment, messages=[{"role": "user", "content": "a b"}]
    )
    rows = gateway.usage_rows(deployment)
    assert [
        (row.api_key_id, row.prompt_tokens, row.completion_tokens, row.usage_reported) for row in rows
    ] == [
        (gateway.key_id(key), 3, 4, True),
        (gateway.key_id(key), 2, 4, True),
    ]


def test_a_client_that_asks_for_usage_gets_it(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("usage")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    pieces = list(
        client(gateway, api_key).chat.completions.create(
            model=deployment,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=2,
        )
    )
    assert pieces[-1].usage is not None and pieces[-1].usage.completion_tokens == 2


def test_an_answer_without_usage_is_recorded_as_unreported(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("no-usage")
    gateway.publish(deployment, [engines.get("no-usage", omit_usage=True, served_model_names=["vllm-model"])])
    stream_raw(gateway, api_key, chat(deployment))
    client(gateway, api_key).chat.completions.create(
        model=deployment, messages=[{"role": "user", "content": "x"}]
    )
    rows = gateway.usage_rows(deployment)
    assert [(row.usage_reported, row.prompt_tokens, row.completion_tokens) for row in rows] == [
        (False, 0, 0)
    ] * 2


def test_reasoning_reaches_the_client_under_both_names(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("reasoning")
    server = engines.get("reasoning", reasoning_tokens=2, served_model_names=["vllm-model"])
    gateway.publish(deployment, [server])
    raw = stream_raw(gateway, api_key, chat(deployment, max_tokens=4))
    deltas = [json.loads(event)["choices"][0]["delta"] for event in data_events(raw) if event != b"[DONE]"]
    thinking = [delta for delta in deltas if "reasoning" in delta]
    assert thinking and all(delta["reasoning_content"] == delta["reasoning"] for delta in thinking)
    whole = client(gateway, api_key).chat.completions.create(
        model=deployment, messages=[{"role": "user", "content": "x"}], max_tokens=4
    )
    extra = whole.choices[0].message.model_extra or {}
    assert extra["reasoning"] and extra["reasoning_content"] == extra["reasoning"]


def test_transformers_stream_gets_done_and_the_deployment_name(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("transformers")
    server = engines.get(
        "transformers", flavor="transformers", model_path="/models/tiny", served_model_names=["/models/tiny"]
    )
    gateway.publish(deployment, [server])
    raw = stream_raw(gateway, api_key, chat(deployment, max_tokens=3))
    events = data_events(raw)
    assert events[-1] == b"[DONE]"
    assert events.count(b"[DONE]") == 1
    assert b"/models/tiny" not in raw
    assert all(json.loads(event)["model"] == deployment for event in events[:-1])
    rows = gateway.usage_rows(deployment)
    assert [(row.completion_tokens, row.usage_reported) for row in rows] == [(3, True)]


def test_done_is_added_when_a_vllm_stream_omits_it(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("no-done")
    gateway.publish(deployment, [engines.get("no-done", omit_done=True, served_model_names=["vllm-model"])])
    events = data_events(stream_raw(gateway, api_key, chat(deployment)))
    assert events[-1] == b"[DONE]"
    assert not any(b'"error"' in event for event in events)


def test_a_cut_stream_ends_with_an_error_event_then_done(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("cut")
    gateway.publish(deployment, [engines.get("cut", cut_after_chunks=2, served_model_names=["vllm-model"])])
    events = data_events(stream_raw(gateway, api_key, chat(deployment, max_tokens=8)))
    assert events[-1] == b"[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == "stream_interrupted"
    assert deployment in error["message"]
    with pytest.raises(openai.APIError, match="stopped in the middle"):
        list(
            client(gateway, api_key).chat.completions.create(
                model=deployment, messages=[{"role": "user", "content": "x"}], stream=True, max_tokens=8
            )
        )
    rows = gateway.usage_rows(deployment)
    assert [(row.status_code, row.usage_reported) for row in rows] == [(502, False)] * 2


def test_a_client_that_leaves_mid_stream_frees_its_replica(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    server = engines.get("slow-leave", itl_ms=300.0, served_model_names=["slow-model"])
    deployment = unique_name("leave")
    gateway.publish(deployment, [server])
    with httpx.stream(
        "POST",
        gateway.base_url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {api_key}"},
        json=chat(deployment, stream=True, max_tokens=50),
        timeout=30,
        verify=shared_tls_context(),
    ) as response:
        pieces = response.iter_raw()  # held: dropping the iterator would close the connection
        assert next(pieces).startswith(b"data: ")
        assert gateway.outstanding(server.base_url) == 1
    # The engine would produce tokens for 15 s more; it stops because the gateway hung up on it.
    wait_until_replica_is_free(gateway, server)
    assert gateway.outstanding(server.base_url) == 0
    assert engine_gauge(server, "num_requests_running") == 0
    rows = gateway.usage_rows(deployment)
    assert [row.status_code for row in rows] == [499]


def test_a_client_that_leaves_before_a_whole_answer_frees_its_replica(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    server = engines.get("slow-leave-whole", itl_ms=300.0, served_model_names=["slow-model"])
    deployment = unique_name("leave-whole")
    gateway.publish(deployment, [server])
    body = json.dumps(chat(deployment, max_tokens=12)).encode()
    host, port = gateway.base_url.removeprefix("http://").split(":")
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(request + body)
        deadline_s = time.monotonic() + 10
        while not engine_gauge(server, "num_requests_running") and time.monotonic() < deadline_s:
            time.sleep(0.02)
        assert gateway.outstanding(server.base_url) == 1
    # The whole answer takes the engine 3.3 s; the gateway lets go of it as soon as the client left
    # (and closes its connection to the engine, which real engines take as an abort).
    deadline_s = time.monotonic() + 10
    while gateway.outstanding(server.base_url) and time.monotonic() < deadline_s:
        time.sleep(0.02)
    assert gateway.outstanding(server.base_url) == 0
    assert [row.status_code for row in gateway.usage_rows(deployment)] == [499]


def test_other_stream_options_of_the_client_reach_the_engine(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("continuous")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    raw = stream_raw(
        gateway, api_key, chat(deployment, max_tokens=3, stream_options={"continuous_usage_stats": True})
    )
    chunks = [json.loads(event) for event in data_events(raw) if event != b"[DONE]"]
    with_choices = [chunk for chunk in chunks if chunk["choices"]]
    assert [chunk["usage"]["completion_tokens"] for chunk in with_choices if "usage" in chunk] == [1, 2, 3]
    assert [row.completion_tokens for row in gateway.usage_rows(deployment)] == [3]


def test_a_prompt_with_a_lone_surrogate_escape_is_forwarded(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("surrogate")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    body = (
        b'{"model": "%s", "messages": [{"role": "user", "content": "caf\\u00e9 \\ud800"}]}'
        % deployment.encode()
    )
    response = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
        content=body,
        timeout=30,
        verify=shared_tls_context(),
    )
    assert response.status_code == 200, response.text
