"""The routes engines serve besides chat: Responses, Anthropic Messages, rerank, score, audio.

Passed through to engines whose backend version lists them (``api_paths``), metered from the
usage the engine reports, refused with a 404 naming the engine otherwise. And ``x-request-id``:
forwarded to the engine, returned to the client, made when the client sent none.
"""

from __future__ import annotations

import logging
import re

import httpx
import openai
import pytest

from modelyard.testing.http_clients import shared_tls_context

from .conftest import GatewayHarness, ReferenceServers, data_events, unique_name

VLLM_PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/rerank",
    "/v1/score",
    "/v1/audio/transcriptions",
    "/v1/audio/translations",
)
WAV = b"RIFF" + bytes(32_000)  # one second of 16 kHz 16-bit silence, as far as the double counts


@pytest.fixture
def deployment(gateway: GatewayHarness, engines: ReferenceServers) -> str:
    """A deployment of the vLLM-flavored double whose served name differs from the deployment's."""
    name = unique_name("routes")
    server = engines.get("vllm-routes", served_model_names=["served-name"])
    gateway.publish(name, [server], served_model_name="served-name", api_paths=VLLM_PATHS)
    return name


def usage_of(gateway: GatewayHarness, deployment: str) -> list[tuple[str, int, int, bool]]:
    return [
        (row.endpoint, row.prompt_tokens, row.completion_tokens, row.usage_reported)
        for row in gateway.usage_rows(deployment)
    ]


def test_the_responses_api_streamed_and_not_is_passed_through_and_metered(
    gateway: GatewayHarness, api_key: str, deployment: str
) -> None:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=api_key, max_retries=0)
    whole = client.responses.create(model=deployment, input="one two three", max_output_tokens=4)
    assert whole.output_text and whole.usage is not None and whole.usage.output_tokens == 4
    assert whole.model == deployment  # the engine answered "served-name"; the client sees its own name
    events = list(
        client.responses.create(model=deployment, input="one two", max_output_tokens=3, stream=True)
    )
    assert events[-1].type == "response.completed"
    assert (
        "".join(event.delta for event in events if event.type == "response.output_text.delta")
        == " the of and"
    )
    assert usage_of(gateway, deployment) == [("/v1/responses", 3, 4, True), ("/v1/responses", 2, 3, True)]


def test_anthropic_messages_with_an_x_api_key_are_metered_streamed_and_not(
    gateway: GatewayHarness, api_key: str, deployment: str
) -> None:
    headers = {"x-api-key": api_key, "anthropic-version": "2023-06-01"}
    body = {"model": deployment, "max_tokens": 5, "messages": [{"role": "user", "content": "a b c d"}]}
    whole = httpx.post(
        gateway.base_url + "/v1/messages", json=body, headers=headers, timeout=30, verify=shared_tls_context()
    )
    assert whole.status_code == 200, whole.text
    assert whole.json()["usage"] == {"input_tokens": 4, "output_tokens": 5}
    streamed = httpx.post(
        gateway.base_url + "/v1/messages",
        json={**body, "stream": True},
        headers=headers,
        timeout=30,
        verify=shared_tls_context(),
    )
    assert streamed.status_code == 200
    names = re.findall(rb"^event: (\S+)", streamed.content, flags=re.M)
    assert names[0] == b"message_start" and names[-1] == b"message_stop"
    assert b"[DONE]" not in streamed.content  # not OpenAI's stream: nothing is added
    counted = httpx.post(
        gateway.base_url + "/v1/messages/count_tokens",
        json=body,
        headers=headers,
        timeout=30,
        verify=shared_tls_context(),
    )
    assert counted.json() == {"input_tokens": 4}
    assert usage_of(gateway, deployment) == [
        ("/v1/messages", 4, 5, True),
        ("/v1/messages", 4, 5, True),
        ("/v1/messages/count_tokens", 0, 0, False),
    ]


def test_gateway_errors_on_the_messages_route_are_in_anthropics_shape(gateway: GatewayHarness) -> None:
    refused = httpx.post(
        gateway.base_url + "/v1/messages",
        json={"model": "x", "max_tokens": 1, "messages": []},
        headers={"x-api-key": "my-not-a-key"},
        timeout=30,
        verify=shared_tls_context(),
    )
    assert refused.status_code == 401
    assert refused.json()["type"] == "error" and refused.json()["error"]["type"] == "authentication_error"


def test_rerank_and_score_are_metered_from_their_total_tokens(
    gateway: GatewayHarness, api_key: str, deployment: str
) -> None:
    headers = {"Authorization": f"Bearer {api_key}"}
    rerank = httpx.post(
        gateway.base_url + "/v1/rerank",
        json={"model": deployment, "query": "q w", "documents": ["a", "b c"]},
        headers=headers,
        timeout=30,
        verify=shared_tls_context(),
    )
    assert rerank.status_code == 200 and len(rerank.json()["results"]) == 2
    score = httpx.post(
        gateway.base_url + "/v1/score",
        json={"model": deployment, "text_1": "a b", "text_2": "c"},
        headers=headers,
        timeout=30,
        verify=shared_tls_context(),
    )
    assert score.status_code == 200 and score.json()["data"][0]["object"] == "score"
    assert usage_of(gateway, deployment) == [("/v1/rerank", 7, 0, True), ("/v1/score", 3, 0, True)]


def test_an_audio_form_reaches_the_engine_under_its_served_name(
    gateway: GatewayHarness, api_key: str, deployment: str
) -> None:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=api_key, max_retries=0)
    # The double refuses any model but "served-name": the gateway rewrote the form's field.
    transcript = client.audio.transcriptions.create(model=deployment, file=("a.wav", WAV, "audio/wav"))
    assert transcript.text
    translation = client.audio.translations.create(model=deployment, file=("a.wav", WAV, "audio/wav"))
    assert translation.text
    assert [row[0] for row in usage_of(gateway, deployment)] == [
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
    ]


def test_a_route_the_engine_does_not_serve_is_a_404_naming_the_engine(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    name = unique_name("tf")
    server = engines.get("transformers-routes", flavor="transformers", served_model_names=["/models/tf"])
    paths = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/audio/transcriptions")
    gateway.publish(name, [server], api_paths=paths)
    response = httpx.post(
        gateway.base_url + "/v1/rerank",
        json={"model": name, "query": "q", "documents": ["a"]},
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=30,
        verify=shared_tls_context(),
    )
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "endpoint_not_served"
    assert error["message"] == (
        f"deployment '{name}' runs transformers reference, which does not serve /v1/rerank "
        "(it serves /v1/chat/completions, /v1/completions, /v1/responses, /v1/audio/transcriptions)"
    )


def test_the_request_id_is_forwarded_returned_and_made_when_missing(
    gateway: GatewayHarness, api_key: str, deployment: str, engines: ReferenceServers
) -> None:
    body = {"model": deployment, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    headers = {"Authorization": f"Bearer {api_key}", "x-request-id": "trace-42"}
    given = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json=body,
        headers=headers,
        timeout=30,
        verify=shared_tls_context(),
    )
    assert given.headers["x-request-id"] == "trace-42"
    # The vLLM double, like vLLM, names its answer after the X-Request-Id it received.
    assert given.json()["id"] == "chatcmpl-trace-42"
    streamed = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json={**body, "stream": True},
        headers={**headers, "x-request-id": "trace-43"},
        timeout=30,
        verify=shared_tls_context(),
    )
    assert streamed.headers["x-request-id"] == "trace-43"
    assert all(b'"id":"chatcmpl-trace-43"' in event for event in data_events(streamed.content)[:-1])
    made = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=30,
        verify=shared_tls_context(),
    )
    assert re.fullmatch(r"[0-9a-f]{22}", made.headers["x-request-id"])
    assert made.json()["id"] == "chatcmpl-" + made.headers["x-request-id"]
    refused = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json=body,
        headers={"x-request-id": "r-1"},
        timeout=30,
        verify=shared_tls_context(),
    )
    assert refused.status_code == 401 and refused.headers["x-request-id"] == "r-1"


def test_every_log_line_of_a_request_names_its_request_id(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers, caplog: pytest.LogCaptureFixture
) -> None:
    name = unique_name("cut")
    gateway.publish(
        name, [engines.get("cutting", cut_after_chunks=2, output_tokens=8, served_model_names=["cut"])]
    )
    body = {"model": name, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    headers = {"Authorization": f"Bearer {api_key}", "x-request-id": "cut-7"}
    with caplog.at_level(logging.WARNING, logger="modelyard.server.gateway"):
        response = httpx.post(
            gateway.base_url + "/v1/chat/completions",
            json=body,
            headers=headers,
            timeout=30,
            verify=shared_tls_context(),
        )
    assert b"stream_interrupted" in data_events(response.content)[-2]
    lines = [
        record.getMessage() for record in caplog.records if record.name.startswith("modelyard.server.gateway")
    ]
    assert lines and all("cut-7" in line for line in lines), lines
