"""What the OpenAPI schema (``/api/openapi.json``) says about errors, bodies and credentials.

FastAPI documents only 2xx and a 422 that this server never returns (validation errors are 400).
``install_openapi(app)`` makes the served schema true to the server:

- every ``/api/v1`` operation lists the statuses it can answer besides its own 2xx (``400``,
  ``401``, ``404``, ``409``, ``413``, ``429``, ``500``, ``507``) with the error body's schema, and
  needs HTTP Basic (or the CLI's bearer token, or the console's session);
- every ``/v1`` operation needs ``Authorization: Bearer <API key>``, lists the gateway's statuses
  (``400``, ``401``, ``403``, ``404``, ``413``, ``429``, ``502``, ``503``) in OpenAI's error shape,
  and the ``POST`` routes declare their JSON body (an object with ``model``; every other field is
  passed to the engine as written);
- the ``422`` entries and their schemas are gone.

The schema itself and ``/api/docs`` are public: they describe the API and hold no data.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from modelyard.server.gateway.routes import gateway_openapi_paths

_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "code": {"type": ["string", "integer", "null"]},
                "hint": {"type": ["string", "null"]},
                "param": {"type": ["string", "null"]},
                "details": {},
            },
        }
    },
}

_REST_STATUSES = {
    "400": "the request is not valid (the message names the field or value)",
    "401": "no or wrong credentials",
    "404": "no such path or named thing",
    "409": "the current state forbids it (in use, already exists, being removed)",
    "413": "the body is over this route's limit",
    "429": "too many failed logins from this address (Retry-After)",
    "500": "a bug: the server log has the details",
    "507": "the disk or the database is full",
}
_GATEWAY_STATUSES = {
    "400": "the body is not a JSON object, has no model, or nests too deep",
    "401": "no, unknown or revoked API key",
    "403": "the key may not use this model",
    "404": "no such model, or its engine does not serve this route",
    "413": "the body is over the gateway's limit",
    "429": "too many failed keys from this address, or a limit of the key (Retry-After)",
    "502": "no replica could be reached, or the engine broke off",
    "503": "no replica is ready (Retry-After while one starts)",
}
_GATEWAY_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["model"],
                "properties": {
                    "model": {"type": "string", "description": "a deployment name (GET /v1/models)"},
                    "stream": {"type": "boolean"},
                    "messages": {"type": "array", "items": {"type": "object"}},
                    "prompt": {"type": "string"},
                    "input": {"type": "string"},
                    "max_tokens": {"type": "integer", "minimum": 1},
                },
                "additionalProperties": True,
            }
        }
    },
}


def _error_responses(statuses: dict[str, str]) -> dict[str, Any]:
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    return {
        status: {"description": description, "content": content} for status, description in statuses.items()
    }


def _rewrite(schema: dict[str, Any]) -> dict[str, Any]:
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["Error"] = _ERROR_SCHEMA
    security_schemes = components.setdefault("securitySchemes", {})
    security_schemes["ApiKey"] = {"type": "http", "scheme": "bearer", "description": "a gateway API key"}
    # /v1 is answered in front of the app's routers (server/gateway/app.py): its operations come
    # from the gateway's route table.
    schema.setdefault("paths", {}).update(gateway_openapi_paths())
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            if path.startswith("/v1/"):
                responses.update(_error_responses(_GATEWAY_STATUSES))
                operation["security"] = [{"ApiKey": []}]
                if method == "post" and "requestBody" not in operation:
                    operation["requestBody"] = _GATEWAY_BODY
            elif path.startswith("/api/v1/"):
                responses.update(_error_responses(_REST_STATUSES))
    return schema


def install_openapi(app: FastAPI) -> None:
    """Serve the rewritten schema from ``app.openapi()`` (built once, on the first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _rewrite(
                get_openapi(
                    title=app.title, version=app.version, routes=app.routes, description=app.description
                )
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
