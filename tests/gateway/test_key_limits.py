"""Limits per API key, as a client meets them: OpenAI's 429 with Retry-After, through the gateway."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import openai
import pytest

from modelyard.store.tables import UsageRecord
from modelyard.testing.http_clients import shared_tls_context

from .conftest import GatewayHarness, ReferenceServers, unique_name
from .slow_stream import SlowStream


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def _post(gateway: GatewayHarness, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        gateway.base_url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json=body,
        timeout=60,
        verify=shared_tls_context(),
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
    answered = _post(gateway, key, _chat(deployment, max_tokens=100))
    refused = _post(gateway, key, _chat(deployment, max_tokens=400))
    too_large = _post(gateway, key, _chat(deployment, max_tokens=1000))
    assert answered.status_code == 200, answered.text
    assert "tokens per minute: limit 500" in _limit_error(refused, "tokens")
    # Waiting never lets this one in: told so, without Retry-After.
    assert too_large.status_code == 429 and "retry-after" not in too_large.headers
    message = too_large.json()["error"]["message"]
    assert "more than the limit of 500 tokens per minute" in message and "lower max_tokens" in message


def test_concurrent_requests_are_limited(gateway: GatewayHarness, engines: ReferenceServers) -> None:
    deployment = unique_name("concurrent")
    engine = engines.get("slow", served_model_names=["vllm-model"], ttft_ms=3000.0)
    gateway.publish(deployment, [engine])
    key = gateway.create_key(max_concurrent_requests=1)
    slow = SlowStream(gateway.base_url, key, _chat(deployment, stream=True))
    slow.start()
    refused = _post(gateway, key, _chat(deployment))
    slow.join()
    after = _post(gateway, key, _chat(deployment))
    assert slow.statuses == [200]
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


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_retry_at_retry_after_is_admitted_and_one_before_is_told_what_is_left(
    gateway: GatewayHarness, engines: ReferenceServers
) -> None:
    """The limiter reads a clock of ours: 3 requests 57 s into a minute against a limit of 3."""
    deployment = unique_name("retry-after")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    key = gateway.create_key(requests_per_minute=3)
    assert gateway.runtime is not None
    limiter = gateway.runtime.limiter
    clock = _Clock(60.0 * 29_000_000 + 57)
    limiter.clock, real_clock = clock, limiter.clock
    try:
        assert [_post(gateway, key, _chat(deployment)).status_code for _ in range(3)] == [200] * 3
        refused = _post(gateway, key, _chat(deployment))
        retry_after_s = int(refused.headers["Retry-After"])
        # 3 x (60 - y)/60 + 1 <= 3 from y = 20 s into the next minute: 3 + 20 s.
        assert retry_after_s == 23
        clock.now += 3.5  # where the old Retry-After pointed, which then said 60
        early = _post(gateway, key, _chat(deployment))
        assert early.status_code == 429 and early.headers["Retry-After"] == "20"
        clock.now += retry_after_s - 3.5
        assert _post(gateway, key, _chat(deployment)).status_code == 200
    finally:
        limiter.clock = real_clock
