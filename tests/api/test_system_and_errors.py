"""System information, and the error shape for requests that cannot be understood."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from modelyard.demo.prepare import DEMO_DEPLOYMENT_NAME
from modelyard.demo.register import register_demo
from modelyard.hardware.gpus import GpuInventory
from modelyard.store.tables import Deployment, Instance

from .conftest import ApiHarness, assert_error


def test_system_names_the_urls_and_database(api: ApiHarness) -> None:
    body = api.client.get("/api/v1/system").json()
    assert body["openai_base_url"] == "http://127.0.0.1:18080/v1"
    assert body["database"] == api.database.engine.url.get_backend_name()
    assert body["database"] in ("sqlite", "postgresql")
    assert body["data_dir"] == str(api.data_dir)


def test_gpus_come_from_the_controller(api: ApiHarness) -> None:
    body = api.client.get("/api/v1/gpus").json()
    assert body["gpus"] == []
    assert body["unavailable_reason"] == "no GPUs (double)"


def test_body_that_is_not_json_is_400(api: ApiHarness) -> None:
    response = api.client.post(
        "/api/v1/keys", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert_error(response.json(), "body_not_json", "body is not JSON")


def test_missing_field_is_400_naming_it(api: ApiHarness) -> None:
    response = api.client.post("/api/v1/models", json={"name": "x"})
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "'path'", "required")


def test_unknown_field_is_400_naming_it(api: ApiHarness) -> None:
    response = api.client.post("/api/v1/keys", json={"name": "x", "colour": "red"})
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "'colour'")


def test_unknown_path_is_404_in_the_error_shape(api: ApiHarness) -> None:
    response = api.client.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_preflight_refusal_carries_the_findings(api: ApiHarness) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from modelyard.server.errors import install_error_handlers
    from modelyard.services.deployment_checks import PreflightFailed

    app = FastAPI()
    install_error_handlers(app)
    finding = {"check_id": "param.unknown-flag", "severity": "error", "message": "--mem-fraction-static"}

    @app.get("/refuse")
    async def refuse() -> None:
        raise PreflightFailed("doctor refused the deployment", findings=[finding])

    response = TestClient(app).get("/refuse")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "preflight_failed"
    assert error["details"] == {"findings": [finding]}


def test_system_reports_the_demo_as_its_deployment_really_is(api: ApiHarness, tiny_model_dir: Path) -> None:
    register_demo(api.database, tiny_model_dir, GpuInventory(unavailable_reason="no GPUs (double)"))
    api.context.demo.state = "deployed"  # handed to the controller, as serve does
    reason = "verification failed, kept out of rotation: verify.chat-answer: the answer is empty"
    with api.database.session() as session:
        deployment = session.scalar(select(Deployment).where(Deployment.name == DEMO_DEPLOYMENT_NAME))
        assert deployment is not None
        session.add(Instance(deployment_id=deployment.id, replica_index=0, state="error", reason=reason))
        session.commit()
    demo = api.client.get("/api/v1/system").json()["demo"]
    assert demo["state"] == "error"
    assert demo["message"] == f"replica 0 error: {reason}"
    with api.database.session() as session:
        instance = session.scalar(select(Instance))
        assert instance is not None
        instance.state, instance.reason = "running", "ready in 3.0 s"
        session.commit()
    assert api.client.get("/api/v1/system").json()["demo"]["state"] == "running"
    assert api.client.delete(f"/api/v1/deployments/{DEMO_DEPLOYMENT_NAME}").status_code < 300
    assert api.client.get("/api/v1/system").json()["demo"]["state"] == "removed"
