"""Each request's time to first token in its usage row (``usage_records.ttft_ms``), as the gateway
sees it, over real HTTP through the gateway to the engine double (the reference server playing
vLLM, its first token 150 ms after the request, the next ones 40 ms apart):

- streamed: to the first event sent to the client, so about 150 ms and well before the end;
- not streamed: to the whole answer being sent (the client's first token is in it), so at least
  the whole generation (150 + 5 x 40 ms);
- a request the engine refuses: none.
"""

from __future__ import annotations

import httpx
import pytest

from .conftest import GatewayHarness, ReferenceServers, unique_name

FIRST_TOKEN_MS = 150.0
BETWEEN_TOKENS_MS = 40.0
TOKENS = 6


@pytest.fixture
def slow_deployment(gateway: GatewayHarness, engines: ReferenceServers) -> str:
    name = unique_name("ttft")
    server = engines.get("vllm-ttft", ttft_ms=FIRST_TOKEN_MS, itl_ms=BETWEEN_TOKENS_MS)
    gateway.publish(name, [server])
    return name


def _chat(gateway: GatewayHarness, key: str, deployment: str, **fields: object) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": deployment, "messages": [{"role": "user", "content": "hi"}], **fields},
        timeout=60,
    )


def test_a_streamed_requests_ttft_is_its_first_event_not_its_end(
    gateway: GatewayHarness, api_key: str, slow_deployment: str
) -> None:
    answer = _chat(gateway, api_key, slow_deployment, max_tokens=TOKENS, stream=True)
    assert answer.status_code == 200 and "[DONE]" in answer.text, answer.text
    [row] = gateway.usage_rows(slow_deployment)
    assert row.ttft_ms is not None
    whole_ms = FIRST_TOKEN_MS + (TOKENS - 1) * BETWEEN_TOKENS_MS
    assert FIRST_TOKEN_MS <= row.ttft_ms < whole_ms, row.ttft_ms


def test_a_whole_answers_ttft_is_when_the_answer_is_sent(
    gateway: GatewayHarness, api_key: str, slow_deployment: str
) -> None:
    answer = _chat(gateway, api_key, slow_deployment, max_tokens=TOKENS)
    assert answer.status_code == 200, answer.text
    [row] = gateway.usage_rows(slow_deployment)
    assert row.ttft_ms is not None
    assert row.ttft_ms >= FIRST_TOKEN_MS + (TOKENS - 1) * BETWEEN_TOKENS_MS, row.ttft_ms


def test_a_refused_request_has_no_ttft(gateway: GatewayHarness, api_key: str, slow_deployment: str) -> None:
    refused = _chat(gateway, api_key, slow_deployment, max_tokens=-1)
    assert refused.status_code == 400, refused.text
    [row] = gateway.usage_rows(slow_deployment)
    assert (row.status_code, row.ttft_ms) == (400, None)
