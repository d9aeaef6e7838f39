"""Backends: the built-in catalog, GPUStack YAML import and export, custom backends."""

from __future__ import annotations

from sqlalchemy import select

from modelyard.store.tables import CustomBackend

from .conftest import ApiHarness, assert_error

CUSTOM_YAML = """\
backend_name: my-engine
default_version: "1.0"
health_check_path: /health
version_configs:
  "1.0":
    entrypoint: my-engine
    run_command: serve {{model_path}} --host {{worker_ip}} --port {{port}} --name {{model_name}}
    env:
      MY_ENGINE_THREADS: "4"
    custom_framework: cpu
"""


def _custom_rows(api: ApiHarness) -> list[str]:
    with api.database.session() as session:
        return list(session.scalars(select(CustomBackend.name)))


def test_builtin_catalog_lists_the_three_engines(api: ApiHarness) -> None:
    names = [item["name"] for item in api.client.get("/api/v1/backends").json()]
    assert {"vllm", "sglang", "transformers"} <= set(names)
    vllm = api.client.get("/api/v1/backends/vllm").json()
    assert "0.25.0" in [version["version"] for version in vllm["versions"]]


def test_import_adds_a_custom_backend(api: ApiHarness) -> None:
    response = api.client.post("/api/v1/backends/import", content=CUSTOM_YAML.encode())
    assert response.status_code == 201, response.text
    assert [spec["name"] for spec in response.json()] == ["my-engine"]
    shown = api.client.get("/api/v1/backends/my-engine").json()
    assert shown["builtin"] is False
    assert shown["versions"][0]["env"] == {"MY_ENGINE_THREADS": "4"}
    assert _custom_rows(api) == ["my-engine"]


def test_export_gives_yaml_that_imports_again(api: ApiHarness) -> None:
    api.client.post("/api/v1/backends/import", content=CUSTOM_YAML.encode())
    exported = api.client.get("/api/v1/backends/my-engine/export")
    assert exported.status_code == 200
    assert "backend_name: my-engine" in exported.text
    # Importing the export again replaces the backend with the same content.
    again = api.client.post("/api/v1/backends/import", content=exported.content)
    assert again.status_code == 201, again.text
    assert _custom_rows(api) == ["my-engine"]


def test_malformed_yaml_names_the_line_and_stores_nothing(api: ApiHarness) -> None:
    broken = "backend_name: x\nversion_configs:\n  '1.0': [unclosed\n"
    response = api.client.post("/api/v1/backends/import", content=broken.encode())
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_yaml"
    assert "line" in error["message"]
    assert _custom_rows(api) == []


def test_yaml_with_a_bad_env_name_is_refused(api: ApiHarness) -> None:
    text = CUSTOM_YAML.replace("MY_ENGINE_THREADS", "1-THREADS")
    response = api.client.post("/api/v1/backends/import", content=text.encode())
    assert response.status_code == 400
    assert _custom_rows(api) == []


def test_import_cannot_shadow_a_builtin(api: ApiHarness) -> None:
    response = api.client.post(
        "/api/v1/backends/import", content=CUSTOM_YAML.replace("my-engine\n", "vllm\n", 1).encode()
    )
    assert response.status_code == 409
    assert_error(response.json(), "already_exists", "built-in")
    assert _custom_rows(api) == []


def test_empty_import_is_refused(api: ApiHarness) -> None:
    response = api.client.post("/api/v1/backends/import", content=b"  \n")
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "empty")


def test_unknown_backend_is_404(api: ApiHarness) -> None:
    response = api.client.get("/api/v1/backends/ghost")
    assert response.status_code == 404
    assert "vllm" in response.json()["error"]["message"]


def test_custom_backend_can_be_removed_but_builtin_cannot(api: ApiHarness) -> None:
    api.client.post("/api/v1/backends/import", content=CUSTOM_YAML.encode())
    assert api.client.delete("/api/v1/backends/my-engine").status_code == 204
    assert _custom_rows(api) == []
    assert api.client.delete("/api/v1/backends/vllm").status_code == 409
