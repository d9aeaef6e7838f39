"""Limits per API key, as a client meets them: OpenAI's 429 with Retry-After, through the gateway."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import httpx
import openai
import pytest

from modelyard.store.tables import UsageRecord

from .conftest import GatewayHarness, ReferenceServers, unique_name


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def _post(gateway: GatewayHarness, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json=body,
        timeout=60,
    )


def _limit_error(response: httpx.Response, limit_type: str) -> str:
    assert response.status_code == 429, response.text
    assert int(response.headers["Retry-After"]) >= 1
    error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert error["type"] == limit_type
    return str(error["message"])


def test_requests_per_minute_are_limited_with_openais_429(
    gateway: GatewayHarness, engines: ReferenceServers
) -> None:
    deployment = unique_name("rpm")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    key = gateway.create_key(requests_per_minute=2)
    statuses = [_post(gateway, key, _chat(deployment)).status_code for _ in range(2)]
    refused = _post(gateway, key, _chat(deployment))
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model=deployment, messages=[{"role": "user", "content": "hi"}])
    assert statuses == [200, 200]
    assert "requests per minute: limit 2, used 2" in _limit_error(refused, "requests")
    other_key = gateway.create_key()
    assert _post(gateway, other_key, _chat(deployment)).status_code == 200


def test_tokens_per_minute_reserve_max_tokens_at_admission(
    gateway: GatewayHarness, engines: ReferenceServers
) -> None:
    deployment = unique_name("tpm")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    key = gateway.create_key(tokens_per_minute=500)
    refused = _post(gateway, key, _chat(deployment, max_tokens=1000))
    answered = _post(gateway, key, _chat(deployment, max_tokens=100))
    assert "tokens per minute: limit 500" in _limit_error(refused, "tokens")
    assert answered.status_code == 200, answered.text


def test_concurrent_requests_are_limited(gateway: GatewayHarness, engines: ReferenceServers) -> None:
    deployment = unique_name("concurrent")
    engine = engines.get("slow", served_model_names=["vllm-model"], ttft_ms=3000.0)
    gateway.publish(deployment, [engine])
    key = gateway.create_key(max_concurrent_requests=1)
    started = threading.Event()
    first: list[int] = []

    def slow_request() -> None:
        with (
            httpx.Client(timeout=60) as client,
            client.stream(
                "POST",
                gateway.base_url + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {key}"},
                json=_chat(deployment, stream=True),
            ) as response,
        ):
            started.set()
            first.append(response.status_code)
            response.read()

    thread = threading.Thread(target=slow_request)
    thread.start()
    assert started.wait(timeout=30)
    refused = _post(gateway, key, _chat(deployment))
    thread.join(timeout=60)
    after = _post(gateway, key, _chat(deployment))
    assert first == [200]
    assert "1 of 1 requests of this key are running" in _limit_error(refused, "requests")
    assert after.status_code == 200


def test_a_daily_token_quota_counts_what_was_used_before_the_server_started(
    gateway: GatewayHarness, engines: ReferenceServers
) -> None:
    deployment = unique_name("quota")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    key = gateway.create_key(token_quota=1000, quota_period="day")
    with gateway.database.session() as session:  # as recorded by an earlier server process today
        session.add(
            UsageRecord(
                api_key_id=gateway.key_id(key),
                deployment_name=deployment,
                endpoint="/v1/chat/completions",
                prompt_tokens=600,
                completion_tokens=395,
                at=datetime.now(UTC),
            )
        )
        session.commit()
    refused = _post(gateway, key, _chat(deployment, max_tokens=50))
    message = _limit_error(refused, "tokens")
    assert "token quota reached: 995 of 1000 tokens this day" in message
    seconds_to_midnight = (
        86_400 - (datetime.now(UTC) - datetime.now(UTC).replace(hour=0, minute=0, second=0)).seconds
    )
    assert abs(int(refused.headers["Retry-After"]) - seconds_to_midnight) <= 5
