"""Model files: validated before anything is stored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sqlalchemy import select

from modelyard.store.tables import ModelFile

from .conftest import ApiHarness, add_model, assert_error


def _model_rows(api: ApiHarness) -> list[str]:
    with api.database.session() as session:
        return list(session.scalars(select(ModelFile.name)))


def test_adding_a_model_reads_its_facts(api: ApiHarness, tiny_model_dir: Path) -> None:
    body = add_model(api, tiny_model_dir)
    assert body["state"] == "valid"
    assert body["architecture"] == "Qwen3ForCausalLM"
    assert isinstance(body["parameter_count"], int) and body["parameter_count"] > 0
    listing = api.client.get("/api/v1/models").json()
    assert [item["name"] for item in listing] == ["tiny"]
    assert api.client.get("/api/v1/models/tiny").json()["path"] == str(tiny_model_dir)


def test_name_defaults_to_the_directory_name(api: ApiHarness, tiny_model_dir: Path) -> None:
    response = api.client.post("/api/v1/models", json={"path": str(tiny_model_dir)})
    assert response.status_code == 201
    assert response.json()["name"] == tiny_model_dir.name


def test_directory_without_weights_is_refused_and_not_stored(api: ApiHarness, tmp_path: Path) -> None:
    directory = tmp_path / "config-only"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    response = api.client.post("/api/v1/models", json={"name": "broken", "path": str(directory)})
    assert response.status_code == 400
    assert_error(response.json(), "invalid_model_directory", str(directory))
    assert _model_rows(api) == []


def test_weights_one_folder_too_deep_suggest_the_right_path(
    api: ApiHarness, tiny_model_dir: Path, tmp_path: Path
) -> None:
    outer = tmp_path / "download"
    shutil.copytree(tiny_model_dir, outer / "inner-model")
    response = api.client.post("/api/v1/models", json={"name": "nested", "path": str(outer)})
    assert response.status_code == 400
    assert "inner-model" in (response.json()["error"]["hint"] or "")
    assert _model_rows(api) == []


def test_missing_directory_is_refused(api: ApiHarness, tmp_path: Path) -> None:
    response = api.client.post("/api/v1/models", json={"path": str(tmp_path / "nowhere")})
    assert response.status_code == 400
    assert _model_rows(api) == []


def test_relative_path_is_refused(api: ApiHarness) -> None:
    response = api.client.post("/api/v1/models", json={"path": "models/x"})
    assert response.status_code == 400
    assert_error(response.json(), "invalid_model_directory", "relative")


def test_duplicate_model_name_is_409(api: ApiHarness, tiny_model_dir: Path) -> None:
    add_model(api, tiny_model_dir)
    response = api.client.post("/api/v1/models", json={"name": "tiny", "path": str(tiny_model_dir)})
    assert response.status_code == 409
    assert _model_rows(api) == ["tiny"]


def test_model_in_use_cannot_be_removed(api: ApiHarness, tiny_model_dir: Path) -> None:
    add_model(api, tiny_model_dir)
    assert api.client.post("/api/v1/deployments", json={"model": "tiny"}).status_code == 201
    response = api.client.delete("/api/v1/models/tiny")
    assert response.status_code == 409
    assert_error(response.json(), "conflict", "tiny")


def test_unused_model_is_removed(api: ApiHarness, tiny_model_dir: Path) -> None:
    add_model(api, tiny_model_dir)
    assert api.client.delete("/api/v1/models/tiny").status_code == 204
    assert _model_rows(api) == []
    assert api.client.get("/api/v1/models/tiny").status_code == 404


def test_a_model_on_a_worker_needs_a_cluster_and_says_so(api: ApiHarness, tiny_model_dir: Path) -> None:
    response = api.client.post(
        "/api/v1/models", json={"name": "remote", "path": str(tiny_model_dir), "worker": "gpu-2"}
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "--worker needs a cluster")
    assert "serve --cluster" in response.json()["error"]["hint"]
    assert _model_rows(api) == []


def test_a_push_needs_a_cluster_and_a_single_host_lists_no_copies(
    api: ApiHarness, tiny_model_dir: Path
) -> None:
    add_model(api, tiny_model_dir)
    response = api.client.post("/api/v1/models/tiny/push", json={"workers": ["gpu-2"]})
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "no cluster")
    [model] = api.client.get("/api/v1/models").json()
    assert model["workers"] == [] and model["on_server"] is True
