"""Deployments: desired state, validated in full before anything is stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from modelyard.store.tables import Deployment

from .conftest import ApiHarness, add_model, assert_error, fake_inventory


@pytest.fixture
def with_model(api: ApiHarness, tiny_model_dir: Path) -> ApiHarness:
    add_model(api, tiny_model_dir)
    return api


def _deployment_rows(api: ApiHarness) -> list[Deployment]:
    with api.database.session() as session:
        return list(session.scalars(select(Deployment)))


def test_deploy_stores_desired_state_and_pokes_the_controller(with_model: ApiHarness) -> None:
    api = with_model
    response = api.client.post(
        "/api/v1/deployments",
        json={
            "model": "tiny",
            "name": "chat",
            "backend_parameters": "--max-new-tokens 16 --chat-template 'a b'",
            "env": ["MY_FLAG=1"],
        },
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["name"] == "chat"
    assert body["backend"] == "transformers"
    assert body["backend_parameters"] == ["--max-new-tokens", "16", "--chat-template", "a b"]
    assert body["env"] == {"MY_FLAG": "1"}
    assert body["gpus_per_replica"] == 0
    assert body["desired_state"] == "running"
    assert api.controller.pokes == 1
    assert [item["name"] for item in api.client.get("/api/v1/deployments").json()] == ["chat"]


def test_name_defaults_to_the_model_name(with_model: ApiHarness) -> None:
    response = with_model.client.post("/api/v1/deployments", json={"model": "tiny"})
    assert response.json()["name"] == "tiny"


def test_names_with_slashes_work_in_paths(with_model: ApiHarness) -> None:
    api = with_model
    assert (
        api.client.post("/api/v1/deployments", json={"model": "tiny", "name": "org/tiny:1"}).status_code
        == 201
    )
    assert api.client.get("/api/v1/deployments/org/tiny:1").json()["name"] == "org/tiny:1"
    assert api.client.post("/api/v1/deployments/org/tiny:1/stop").json()["desired_state"] == "stopped"


def test_unknown_model_is_404_and_nothing_stored(api: ApiHarness) -> None:
    response = api.client.post("/api/v1/deployments", json={"model": "ghost"})
    assert response.status_code == 404
    assert_error(response.json(), "not_found", "'ghost'")
    assert _deployment_rows(api) == []


def test_unknown_backend_version_is_refused_listing_the_known_ones(with_model: ApiHarness) -> None:
    api = with_model
    response = api.client.post(
        "/api/v1/deployments", json={"model": "tiny", "backend": "vllm", "backend_version": "0.0.1"}
    )
    assert response.status_code == 404
    assert_error(response.json(), "not_found", "'0.0.1'", "0.25.0")
    assert _deployment_rows(api) == []
    assert api.controller.pokes == 0


def test_unknown_backend_is_refused(with_model: ApiHarness) -> None:
    response = with_model.client.post("/api/v1/deployments", json={"model": "tiny", "backend": "llamafile"})
    assert response.status_code == 404
    assert_error(response.json(), "not_found", "'llamafile'")
    assert _deployment_rows(with_model) == []


def test_more_gpus_than_exist_is_refused(with_model: ApiHarness) -> None:
    api = with_model
    api.controller.inventory = fake_inventory(1)
    response = api.client.post(
        "/api/v1/deployments", json={"model": "tiny", "backend": "vllm", "gpus_per_replica": 2}
    )
    assert response.status_code == 409
    assert_error(response.json(), "unschedulable", "needs 2 GPU")
    assert _deployment_rows(api) == []


def test_gpu_ids_that_do_not_exist_are_refused(with_model: ApiHarness) -> None:
    api = with_model
    api.controller.inventory = fake_inventory(2)
    response = api.client.post(
        "/api/v1/deployments", json={"model": "tiny", "backend": "vllm", "gpu_ids": [1, 3]}
    )
    assert response.status_code == 409
    assert_error(response.json(), "unschedulable", "[3]")
    assert _deployment_rows(api) == []


def test_gpu_backend_on_a_host_without_gpus_is_refused(with_model: ApiHarness) -> None:
    response = with_model.client.post("/api/v1/deployments", json={"model": "tiny", "backend": "vllm"})
    assert response.status_code == 409
    assert_error(response.json(), "unschedulable")
    assert _deployment_rows(with_model) == []


def test_gpu_count_defaults_to_one_on_a_gpu_host(with_model: ApiHarness) -> None:
    api = with_model
    api.controller.inventory = fake_inventory(1)
    response = api.client.post("/api/v1/deployments", json={"model": "tiny", "backend": "vllm"})
    assert response.status_code == 201, response.text
    assert response.json()["gpus_per_replica"] == 1


def test_unclosed_quote_in_parameters_is_refused(with_model: ApiHarness) -> None:
    response = with_model.client.post(
        "/api/v1/deployments", json={"model": "tiny", "backend_parameters": "--chat-template 'oops"}
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "line 1")
    assert _deployment_rows(with_model) == []


def test_env_without_equals_is_refused(with_model: ApiHarness) -> None:
    response = with_model.client.post(
        "/api/v1/deployments", json={"model": "tiny", "env": ["HF_HUB_OFFLINE"]}
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "'='")
    assert _deployment_rows(with_model) == []


def test_parameters_the_platform_sets_are_refused(with_model: ApiHarness) -> None:
    response = with_model.client.post(
        "/api/v1/deployments", json={"model": "tiny", "backend_parameters": "--port 9000"}
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "--port")
    assert _deployment_rows(with_model) == []


def test_env_setting_cuda_visible_devices_is_refused(with_model: ApiHarness) -> None:
    response = with_model.client.post(
        "/api/v1/deployments", json={"model": "tiny", "env": {"CUDA_VISIBLE_DEVICES": "0"}}
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "CUDA_VISIBLE_DEVICES")
    assert _deployment_rows(with_model) == []


def test_invalid_name_is_refused(with_model: ApiHarness) -> None:
    response = with_model.client.post("/api/v1/deployments", json={"model": "tiny", "name": "my model"})
    assert response.status_code == 400
    assert _deployment_rows(with_model) == []


def test_duplicate_name_is_409(with_model: ApiHarness) -> None:
    api = with_model
    api.client.post("/api/v1/deployments", json={"model": "tiny"})
    response = api.client.post("/api/v1/deployments", json={"model": "tiny"})
    assert response.status_code == 409
    assert len(_deployment_rows(api)) == 1


def test_negative_replicas_are_refused(with_model: ApiHarness) -> None:
    response = with_model.client.post("/api/v1/deployments", json={"model": "tiny", "replicas": -1})
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "replicas")


def test_scale_stop_start_and_remove(with_model: ApiHarness) -> None:
    api = with_model
    api.client.post("/api/v1/deployments", json={"model": "tiny"})
    assert api.client.patch("/api/v1/deployments/tiny", json={"replicas": 3}).json()["replicas"] == 3
    assert api.client.post("/api/v1/deployments/tiny/stop").json()["desired_state"] == "stopped"
    assert api.client.post("/api/v1/deployments/tiny/start").json()["desired_state"] == "running"
    response = api.client.delete("/api/v1/deployments/tiny")
    assert response.status_code == 202
    assert response.json()["state"] == "removing"
    assert api.controller.pokes == 5
    # The controller (a double here) deletes the row once the instances are gone.
    assert [row.desired_state for row in _deployment_rows(api)] == ["deleted"]
    response = api.client.post("/api/v1/deployments/tiny/start")
    assert response.status_code == 409


def test_scaling_past_the_gpus_is_refused_and_keeps_replicas(with_model: ApiHarness) -> None:
    api = with_model
    api.controller.inventory = fake_inventory(2)
    api.client.post("/api/v1/deployments", json={"model": "tiny", "backend": "vllm", "gpus_per_replica": 1})
    response = api.client.patch("/api/v1/deployments/tiny", json={"replicas": 3})
    assert response.status_code == 409
    assert [row.replicas for row in _deployment_rows(api)] == [1]


def test_patch_of_other_fields_is_refused_naming_them(with_model: ApiHarness) -> None:
    api = with_model
    api.client.post("/api/v1/deployments", json={"model": "tiny"})
    response = api.client.patch("/api/v1/deployments/tiny", json={"replicas": 1, "backend": "vllm"})
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "'backend'")


def test_unknown_deployment_is_404_listing_known_ones(with_model: ApiHarness) -> None:
    api = with_model
    api.client.post("/api/v1/deployments", json={"model": "tiny"})
    response = api.client.post("/api/v1/deployments/ghost/stop")
    assert response.status_code == 404
    assert "tiny" in response.json()["error"]["hint"]


def test_doctor_error_refuses_the_deployment_with_findings(with_model: ApiHarness) -> None:
    api = with_model
    api.controller.inventory = fake_inventory(1)
    response = api.client.post(
        "/api/v1/deployments",
        json={"model": "tiny", "backend": "vllm", "backend_parameters": "--mem-fraction-static 0.8"},
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "preflight_failed"
    assert "--mem-fraction-static" in error["message"]
    assert any(finding["severity"] == "error" for finding in error["details"]["findings"])
    assert _deployment_rows(api) == []


def test_doctor_warnings_are_kept_on_the_deployment(with_model: ApiHarness) -> None:
    api = with_model
    api.controller.inventory = fake_inventory(1)
    response = api.client.post(
        "/api/v1/deployments",
        json={
            "model": "tiny",
            "backend": "vllm",
            "backend_version": "0.25.0",
            "backend_parameters": ["--enable-auto-tool-choice", "--tool-call-parser qwen3_coder"],
        },
    )
    assert response.status_code == 201, response.text
    warnings = api.client.get("/api/v1/deployments/tiny").json()["warnings"]
    assert [warning["check_id"] for warning in warnings] == ["param.tool-call-parser-mismatch"]


def test_a_driver_too_old_for_the_engine_refuses_the_deployment(with_model: ApiHarness) -> None:
    api = with_model
    # vLLM 0.25.0 is a CUDA 13.0 build; driver 550 only runs CUDA 12.4.
    api.controller.inventory = fake_inventory(1, driver_version="550.163.01")
    response = api.client.post(
        "/api/v1/deployments", json={"model": "tiny", "backend": "vllm", "backend_version": "0.25.0"}
    )
    assert response.status_code == 400
    assert_error(response.json(), "preflight_failed", "550.163.01")
    findings = {finding["check_id"] for finding in response.json()["error"]["details"]["findings"]}
    assert "host.driver-too-old" in findings
    assert _deployment_rows(api) == []
