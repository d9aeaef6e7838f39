"""A deployment's limits for every key together: stored, shown, replaced, handed to the gateway."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelyard.control.endpoints import DeploymentLimits

from .conftest import ApiHarness, add_model


@pytest.fixture
def with_model(api: ApiHarness, tiny_model_dir: Path) -> ApiHarness:
    add_model(api, tiny_model_dir)
    return api


def test_limits_given_at_deploy_are_shown_and_reach_the_gateway(with_model: ApiHarness) -> None:
    api = with_model
    limits = {"requests_per_minute": 600, "tokens_per_minute": None, "max_concurrent_requests": 8}
    body = {"model": "tiny", "name": "chat", "limits": limits}
    response = api.client.post("/api/v1/deployments", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["limits"] == limits
    assert api.client.get("/api/v1/deployments/chat").json()["limits"] == limits
    given = api.context.endpoints.limits_for("chat")
    assert given is not None
    assert given == DeploymentLimits(given.deployment_id, 600, None, 8)


def test_a_patch_replaces_the_limits_whole_and_an_empty_set_removes_them(with_model: ApiHarness) -> None:
    api = with_model
    api.client.post("/api/v1/deployments", json={"model": "tiny", "name": "chat"})
    assert api.context.endpoints.limits_for("chat") is None
    changed = api.client.patch("/api/v1/deployments/chat", json={"limits": {"tokens_per_minute": 50_000}})
    assert changed.status_code == 200, changed.text
    assert changed.json()["limits"] == {
        "requests_per_minute": None,
        "tokens_per_minute": 50_000,
        "max_concurrent_requests": None,
    }
    given = api.context.endpoints.limits_for("chat")
    assert isinstance(given, DeploymentLimits) and given.tokens_per_minute == 50_000
    cleared = api.client.patch("/api/v1/deployments/chat", json={"limits": {}})
    assert cleared.json()["limits"]["tokens_per_minute"] is None
    assert api.context.endpoints.limits_for("chat") is None


@pytest.mark.parametrize(
    "limits",
    [{"requests_per_minute": 0}, {"tokens_per_minute": -5}, {"max_concurrent_requests": 2**31}, {"rpm": 5}],
)
def test_a_bad_limit_is_refused_and_nothing_changes(with_model: ApiHarness, limits: dict[str, int]) -> None:
    api = with_model
    body = {"model": "tiny", "name": "chat", "limits": {"requests_per_minute": 9}}
    assert api.client.post("/api/v1/deployments", json=body).status_code == 201
    refused = api.client.patch("/api/v1/deployments/chat", json={"limits": limits})
    assert refused.status_code == 400, refused.text
    assert next(iter(limits)) in refused.text
    assert api.client.get("/api/v1/deployments/chat").json()["limits"]["requests_per_minute"] == 9
