"""A project's quotas, as its members' clients meet them through the gateway: they hold for every
key of the project together, on top of each key's own limits, and the 429 names the project and
the limit."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx

from modelyard.store.tables import Project, UsageRecord
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


def _project(gateway: GatewayHarness, **quotas: int) -> tuple[str, int]:
    name = unique_name("team")
    with gateway.database.session() as session:
        project = Project(name=name, **quotas)
        session.add(project)
        session.commit()
        return name, project.id


def _refusal(response: httpx.Response, limit_type: str) -> str:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert (error["code"], error["type"]) == ("rate_limit_exceeded", limit_type), error
    return str(error["message"])


def test_a_projects_daily_tokens_hold_for_all_its_keys_together(
    gateway: GatewayHarness, engines: ReferenceServers
) -> None:
    deployment = unique_name("project-quota")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    name, project_id = _project(gateway, tokens_per_day=1000)
    first_key = gateway.create_key(project_id=project_id)
    second_key = gateway.create_key(project_id=project_id)
    outside_key = gateway.create_key()  # in the default project, which has no quota
    with gateway.database.session() as session:  # what the project's first key used today
        session.add(
            UsageRecord(
                api_key_id=gateway.key_id(first_key),
                deployment_name=deployment,
                endpoint="/v1/chat/completions",
                prompt_tokens=600,
                completion_tokens=395,
                at=datetime.now(UTC),
            )
        )
        session.commit()
    refused = _post(gateway, second_key, _chat(deployment, max_tokens=50))
    too_large = _post(gateway, second_key, _chat(deployment, max_tokens=5000))
    outside = _post(gateway, outside_key, _chat(deployment, max_tokens=50))
    message = _refusal(refused, "tokens")
    assert f"project {name!r} reached its token quota: 995 of 1000 tokens per day used" in message
    assert "tokens_per_day" in message and int(refused.headers["Retry-After"]) >= 1
    assert "whole quota of 1000 tokens per day" in _refusal(too_large, "tokens")
    assert "retry-after" not in too_large.headers  # waiting never helps
    assert outside.status_code == 200, outside.text


def test_a_projects_requests_at_once_hold_for_all_its_keys_together(
    gateway: GatewayHarness, engines: ReferenceServers
) -> None:
    deployment = unique_name("project-concurrent")
    gateway.publish(deployment, [engines.get("slow", served_model_names=["vllm-model"], ttft_ms=3000.0)])
    name, project_id = _project(gateway, max_concurrent_requests=1)
    first_key = gateway.create_key(project_id=project_id)
    second_key = gateway.create_key(project_id=project_id)
    slow = SlowStream(gateway.base_url, first_key, _chat(deployment, stream=True))
    slow.start()
    refused = _post(gateway, second_key, _chat(deployment))
    slow.join()
    after = _post(gateway, second_key, _chat(deployment))
    assert slow.statuses == [200]
    message = _refusal(refused, "requests")
    assert (
        f"project {name!r} reached its limit of 1 requests at once: 1 of its keys' requests are running"
        in message
    )
    assert refused.headers["Retry-After"] == "1"
    assert after.status_code == 200, after.text
