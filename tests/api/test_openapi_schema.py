"""The served schema tells the truth: every error status, the error body, the credentials, the
gateway's request bodies; never the 422 this server does not send."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from modelyard.server.app import create_app
from modelyard.server.context import ServerContext
from modelyard.settings import Settings
from modelyard.store.database import Database


def _schema(tmp_path: Path) -> dict[str, Any]:
    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    context = ServerContext(settings=Settings(data_dir=tmp_path, deploy_demo=False), database=database)
    client = TestClient(create_app(context))  # not entered: no lifespan, no controller
    response = client.get("/api/openapi.json")
    database.close()
    assert response.status_code == 200
    schema: dict[str, Any] = response.json()
    return schema


def test_every_operation_lists_its_error_statuses_and_none_says_422(tmp_path: Path) -> None:
    schema = _schema(tmp_path)
    operations = [
        (path, method, operation)
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
        if path.startswith(("/api/v1/", "/v1/"))
    ]
    assert len(operations) > 30
    for path, method, operation in operations:
        statuses = set(operation["responses"])
        assert "422" not in statuses, (method, path)
        expected = {"400", "401", "404", "413", "429"} | ({"507"} if path.startswith("/api/") else {"503"})
        assert expected <= statuses, (method, path, statuses)
        error = operation["responses"]["400"]["content"]["application/json"]["schema"]
        assert error == {"$ref": "#/components/schemas/Error"}
    assert "HTTPValidationError" not in schema["components"]["schemas"]


def test_rest_operations_need_basic_auth_and_gateway_ones_a_bearer_key(tmp_path: Path) -> None:
    schema = _schema(tmp_path)
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            names = {name for requirement in operation.get("security", []) for name in requirement}
            if path.startswith("/v1/"):
                assert names == {"ApiKey"}, (method, path)
            elif path.startswith("/api/v1/"):
                assert "HTTPBasic" in names, (method, path)


def test_the_gateway_post_routes_declare_their_json_body(tmp_path: Path) -> None:
    paths = _schema(tmp_path)["paths"]
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body["required"] == ["model"], path
