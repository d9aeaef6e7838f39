"""What a client sees when it cannot be served: OpenAI-shaped errors with the right status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select

from modelyard.control.endpoints import Endpoint
from modelyard.store.tables import Deployment, Instance, ModelFile
from modelyard.testing.http_clients import shared_tls_context

from .conftest import GatewayHarness, ReferenceServers, refused_port, unique_name


def post(
    gateway: GatewayHarness, key: str | None, body: Any, path: str = "/v1/chat/completions"
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    content = body if isinstance(body, bytes) else None
    json_body = None if isinstance(body, bytes) else body
    return httpx.post(
        gateway.base_url + path,
        headers=headers,
        content=content,
        json=json_body,
        timeout=30,
        verify=shared_tls_context(),
    )


def error_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code, error
    return dict(error)


def chat(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}]}


def test_missing_key_is_401(gateway: GatewayHarness) -> None:
    response = post(gateway, None, chat("x"))
    error_of(response, 401, "invalid_api_key")
    assert response.headers["www-authenticate"] == "Bearer"


def test_wrong_key_is_401_through_the_openai_client(gateway: GatewayHarness) -> None:
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="my-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as raised:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
    assert "is not valid" in str(raised.value)


def test_revoked_key_is_401_after_invalidate(gateway: GatewayHarness, engines: ReferenceServers) -> None:
    deployment = unique_name("revoked")
    gateway.publish(deployment, [engines.get("vllm", served_model_names=["vllm-model"])])
    key = gateway.create_key()
    assert post(gateway, key, chat(deployment)).status_code == 200
    gateway.revoke_key_in_database(key)
    gateway.call(lambda: gateway.context.key_cache.invalidate())
    error = error_of(post(gateway, key, chat(deployment)), 401, "invalid_api_key")
    assert "revoked" in error["message"]


def test_body_not_json_is_400(gateway: GatewayHarness, api_key: str) -> None:
    error = error_of(post(gateway, api_key, b"{not json"), 400, "invalid_json")
    assert "not JSON" in error["message"]
    assert error["type"] == "invalid_request_error"


def test_body_without_model_is_400(gateway: GatewayHarness, api_key: str) -> None:
    error = error_of(post(gateway, api_key, {"messages": []}), 400, "missing_model")
    assert error["param"] == "model"


def test_unknown_model_is_404_listing_the_known_ones(gateway: GatewayHarness, api_key: str) -> None:
    known = unique_name("known")
    gateway.publish_endpoints(known, [])
    error = error_of(post(gateway, api_key, chat("no-such-model")), 404, "model_not_found")
    assert "'no-such-model'" in error["message"]
    assert known in error["message"]


def test_model_not_allowed_for_the_key_is_403(gateway: GatewayHarness) -> None:
    allowed, other = unique_name("allowed"), unique_name("other")
    gateway.publish_endpoints(allowed, [])
    gateway.publish_endpoints(other, [])
    key = gateway.create_key(allowed_deployments=[allowed])
    error = error_of(post(gateway, key, chat(other)), 403, "model_not_allowed")
    assert allowed in error["message"]


def test_404_for_a_limited_key_lists_only_what_it_may_use(gateway: GatewayHarness) -> None:
    allowed, hidden = unique_name("allowed"), unique_name("hidden")
    gateway.publish_endpoints(allowed, [])
    gateway.publish_endpoints(hidden, [])
    key = gateway.create_key(allowed_deployments=[allowed])
    error = error_of(post(gateway, key, chat("nope")), 404, "model_not_found")
    assert allowed in error["message"] and hidden not in error["message"]


def test_models_lists_only_what_the_key_may_see(gateway: GatewayHarness, api_key: str) -> None:
    allowed, hidden = unique_name("allowed"), unique_name("hidden")
    gateway.publish_endpoints(allowed, [])
    gateway.publish_endpoints(hidden, [])
    limited = gateway.create_key(allowed_deployments=[allowed])
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=limited, max_retries=0)
    models = client.models.list()
    assert [model.id for model in models.data] == [allowed]
    assert models.data[0].owned_by == "modelyard"
    everything = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=api_key, max_retries=0)
    assert {allowed, hidden} <= {model.id for model in everything.models.list().data}


def test_no_ready_replica_is_503_saying_what_the_replicas_do(gateway: GatewayHarness, api_key: str) -> None:
    deployment = unique_name("starting")
    with gateway.database.session() as session:
        model_file = ModelFile(name=deployment, path="/models/x")
        session.add(model_file)
        session.flush()
        record = Deployment(
            name=deployment, model_file_id=model_file.id, backend="vllm", backend_version="0.25.0"
        )
        session.add(record)
        session.flush()
        session.add(Instance(deployment_id=record.id, replica_index=0, state="starting"))
        session.commit()
    gateway.publish_endpoints(deployment, [])
    response = post(gateway, api_key, chat(deployment))
    error = error_of(response, 503, "no_ready_replica")
    assert error["message"] == f"deployment {deployment!r} has no ready replica (1 starting)" + (
        f" (see why with `modelyard ps` and `modelyard logs {deployment}`)"
    )
    # A replica is on its way: clients are told when to try again.
    assert response.headers["retry-after"] == "5"
    with gateway.database.session() as session:
        stopped = session.get(Deployment, record.id)
        assert stopped is not None
        stopped.desired_state = "stopped"
        session.commit()
    response = post(gateway, api_key, chat(deployment))
    assert "stopped: start it with" in error_of(response, 503, "no_ready_replica")["message"]
    assert "retry-after" not in response.headers  # nothing is coming back by itself
    # Kept out of rotation by failed verification: it waits for the user, not for a restart.
    with gateway.database.session() as session:
        running = session.get(Deployment, record.id)
        assert running is not None
        running.desired_state = "running"
        [instance] = running.instances
        instance.state = "error"
        session.commit()
    assert "retry-after" not in post(gateway, api_key, chat(deployment)).headers
    with gateway.database.session() as session:
        [instance] = session.scalars(select(Instance).where(Instance.deployment_id == record.id))
        instance.next_start_at = datetime.now(UTC)  # a crash: the controller restarts it
        session.commit()
    assert post(gateway, api_key, chat(deployment)).headers["retry-after"] == "5"


def test_unreachable_replicas_are_502(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("gone")
    closed = refused_port()
    try:
        server = engines.get("vllm", served_model_names=["vllm-model"])
        gateway.publish_endpoints(
            deployment,
            [
                Endpoint(
                    deployment_name=deployment,
                    instance_id=1,
                    base_url=f"http://127.0.0.1:{closed.getsockname()[1]}",
                    served_model_name=server.config.served_model_names[0],
                )
            ],
        )
        error_of(post(gateway, api_key, chat(deployment)), 502, "engine_unreachable")
    finally:
        closed.close()


def test_engine_errors_reach_the_client_in_openai_shape(
    gateway: GatewayHarness, api_key: str, engines: ReferenceServers
) -> None:
    deployment = unique_name("sglang")
    gateway.publish(deployment, [engines.get("sglang", flavor="sglang", served_model_names=["sglang-model"])])
    response = post(gateway, api_key, {**chat(deployment), "max_tokens": 10**9})
    assert response.status_code == 400
    error = response.json()["error"]
    assert "maximum context length" in error["message"]
    assert error["code"] == 400
    rows = gateway.usage_rows(deployment)
    assert [(row.status_code, row.usage_reported) for row in rows] == [(400, False)]


def test_models_names_the_engine_of_ready_deployments(gateway: GatewayHarness, api_key: str) -> None:
    ready, waiting = unique_name("ready"), unique_name("waiting")
    gateway.publish_endpoints(
        ready,
        [
            Endpoint(
                deployment_name=ready,
                instance_id=10_001,
                base_url="http://127.0.0.1:9",
                served_model_name=ready,
                engine="vllm",
                engine_version="0.25.0",
            )
        ],
    )
    gateway.publish_endpoints(waiting, [])
    response = httpx.get(
        gateway.base_url + "/v1/models",
        headers={"Authorization": f"Bearer {api_key}"},
        verify=shared_tls_context(),
    )
    models = {model["id"]: model for model in response.json()["data"]}
    assert models[ready]["modelyard"] == {"ready_replicas": 1, "engine": "vllm", "engine_version": "0.25.0"}
    assert models[waiting]["modelyard"] == {"ready_replicas": 0}
