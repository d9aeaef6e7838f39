"""System information, and the error shape for requests that cannot be understood."""

from __future__ import annotations

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
