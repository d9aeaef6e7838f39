"""The ``/v1`` routes the gateway forwards, and what each one's body and stream look like.

A route is passed through to a replica only when the deployment's backend version lists it in
``api_paths`` (``backends/spec.py``); otherwise the client gets a 404 naming the engine.

=============================  =========  =======================================================
route                          body       answer (when streamed)
=============================  =========  =======================================================
``/v1/chat/completions``       JSON       OpenAI chunks (normalised: reasoning, usage, [DONE])
``/v1/completions``            JSON       OpenAI chunks (normalised)
``/v1/embeddings``             JSON       never streamed
``/v1/responses``              JSON       Responses API events, passed through (usage read)
``/v1/messages``               JSON       Anthropic Messages events, passed through (usage read)
``/v1/messages/count_tokens``  JSON       never streamed
``/v1/rerank``, ``/v1/score``  JSON       never streamed
``/v1/audio/transcriptions``   multipart  passed through (vLLM streams with ``stream=true``)
``/v1/audio/translations``     multipart  passed through
``/v1/audio/speech``           JSON       audio bytes, passed through
=============================  =========  =======================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

BodyKind = Literal["json", "multipart"]
# "openai": chat/completions chunks, normalised event by event (streaming.py);
# "passthrough": any other event stream or body, relayed as it is, usage read on the way (passthrough.py).
AnswerKind = Literal["openai", "passthrough"]


@dataclass(frozen=True)
class ApiRoute:
    path: str
    body: BodyKind
    answer: AnswerKind
    # Errors the gateway makes itself are in Anthropic's shape on /v1/messages (its SDK reads them).
    anthropic_errors: bool = False


_ROUTES = (
    ApiRoute("/v1/chat/completions", "json", "openai"),
    ApiRoute("/v1/completions", "json", "openai"),
    ApiRoute("/v1/embeddings", "json", "openai"),
    ApiRoute("/v1/responses", "json", "passthrough"),
    ApiRoute("/v1/messages", "json", "passthrough", anthropic_errors=True),
    ApiRoute("/v1/messages/count_tokens", "json", "passthrough", anthropic_errors=True),
    ApiRoute("/v1/rerank", "json", "passthrough"),
    ApiRoute("/v1/score", "json", "passthrough"),
    ApiRoute("/v1/audio/transcriptions", "multipart", "passthrough"),
    ApiRoute("/v1/audio/translations", "multipart", "passthrough"),
    ApiRoute("/v1/audio/speech", "json", "passthrough"),
)

API_ROUTES: dict[str, ApiRoute] = {route.path: route for route in _ROUTES}

# Streamed answers in OpenAI's chunk format, which the gateway normalises event by event.
OPENAI_STREAMING_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


_MULTIPART_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["model", "file"],
                "properties": {
                    "model": {"type": "string", "description": "a deployment name (GET /v1/models)"},
                    "file": {"type": "string", "format": "binary"},
                    "stream": {"type": "string", "enum": ["true", "false"]},
                },
            }
        }
    },
}


def gateway_openapi_paths() -> dict[str, Any]:
    """The gateway's operations for the served OpenAPI schema (``server/openapi_docs.py`` adds
    their error statuses, the bearer key and the JSON body of the JSON routes). ``/v1`` is answered
    in front of the REST API's routers, so FastAPI does not see these routes itself."""
    ok = {"200": {"description": "the engine's answer (JSON, or an event stream when streamed)"}}
    paths: dict[str, Any] = {
        "/v1/models": {
            "get": {
                "summary": "the deployments this key may use",
                "operationId": "list_models",
                "responses": ok,
            }
        },
        "/v1/models/{model}": {
            "get": {
                "summary": "one deployment",
                "operationId": "retrieve_model",
                "parameters": [
                    {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": ok,
            }
        },
    }
    for route in _ROUTES:
        operation: dict[str, Any] = {
            "summary": f"passed to a replica of the deployment named by model ({route.answer} answer)",
            "operationId": "gateway" + route.path.replace("/", "_"),
            "responses": dict(ok),
            "tags": ["gateway"],
        }
        if route.body == "multipart":
            operation["requestBody"] = _MULTIPART_BODY
        paths[route.path] = {"post": operation}
    for item in paths.values():
        for operation in item.values():
            operation.setdefault("tags", ["gateway"])
    return paths
