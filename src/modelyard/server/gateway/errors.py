"""The gateway's errors, sent in OpenAI's shape so every OpenAI SDK can read them.

Body: ``{"error": {"message", "type", "param", "code"}}``. ``type`` follows the REST API's
vocabulary (``modelyard.server.errors``); ``code`` names the case so scripts can branch on it:

==========  ==========================  =====================================================
status      code                        when
==========  ==========================  =====================================================
400         ``invalid_json``            the body is not a JSON object
400         ``missing_model``           the body has no string ``model``
401         ``invalid_api_key``         no ``Authorization: Bearer``, an unknown or revoked key
403         ``model_not_in_project``    the deployment belongs to another project than the key's
403         ``model_not_allowed``       the key is limited to other deployments
404         ``model_not_found``         no deployment of that name (the message lists the known)
404         ``endpoint_not_served``     the deployment's engine does not serve this route (names it)
404         ``unknown_route``           no such /v1 route
502         ``engine_unreachable``      no replica could be reached (connection refused / reset)
503         ``no_ready_replica``        the deployment exists but no replica is ready
503         ``scaled_to_zero``          scaled to zero and starting: held past ``max_hold_s`` or
                                        more than ``max_held_requests`` held (``Retry-After``)
503         ``key_check_unavailable``   the database did not answer a key lookup
==========  ==========================  =====================================================

Inside a stream that the engine cut, the client gets the same shape as an SSE event
(``stream_interrupted``), then ``data: [DONE]``. On ``/v1/messages`` the gateway's own errors are
in Anthropic's shape instead (``{"type": "error", "error": {"type", "message"}}``), which the
Anthropic SDKs read.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from modelyard.errors import Forbidden, InvalidInput, ModelyardError, NotFound, Unauthorized

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type_for(status: int) -> str:
    """OpenAI-style ``type`` for an HTTP status (``server_error`` for 5xx and the unknown)."""
    return _TYPE_BY_STATUS.get(status, "invalid_request_error" if 400 <= status < 500 else "server_error")


class InvalidApiKey(Unauthorized):
    code = "invalid_api_key"


class ModelNotAllowed(Forbidden):
    code = "model_not_allowed"
    param = "model"


class ModelNotInProject(Forbidden):
    code = "model_not_in_project"
    param = "model"


class ModelNotFound(NotFound):
    code = "model_not_found"
    param = "model"


class EndpointNotServed(NotFound):
    code = "endpoint_not_served"


class UnknownRoute(NotFound):
    code = "unknown_route"


class MethodNotAllowed(ModelyardError):
    http_status = 405
    code = "method_not_allowed"


class InvalidJsonBody(InvalidInput):
    code = "invalid_json"


class MissingModel(InvalidInput):
    code = "missing_model"
    param = "model"


class NoReadyReplica(ModelyardError):
    http_status = 503
    code = "no_ready_replica"
    param = "model"

    def __init__(
        self, message: str, *, hint: str | None = None, retry_after_seconds: int | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        # Sent as Retry-After when a replica is on its way (starting, or restarting after an
        # error): the OpenAI clients wait that long before their automatic retries.
        self.retry_after_seconds = retry_after_seconds


class ScaledToZero(NoReadyReplica):
    """A deployment scaled to zero is starting a replica, and the gateway cannot hold this
    request until it is ready (too many held, or held too long)."""

    code = "scaled_to_zero"


class ClientLeftWhileHeld(ModelyardError):
    """The client hung up while its request was held for a deployment scaled to zero (recorded
    as nginx's 499; nobody reads the answer)."""

    http_status = 499
    code = "client_closed"


class KeyCheckUnavailable(ModelyardError):
    http_status = 503
    code = "key_check_unavailable"


class EngineUnreachable(ModelyardError):
    http_status = 502
    code = "engine_unreachable"


def openai_error(
    message: str, *, status: int, code: str | int | None, param: str | None = None
) -> dict[str, Any]:
    """The ``{"error": {...}}`` object for one error."""
    return {"error": {"message": message, "type": error_type_for(status), "param": param, "code": code}}


def error_json_bytes(message: str, *, status: int, code: str | int | None, param: str | None = None) -> bytes:
    return json.dumps(openai_error(message, status=status, code=code, param=param)).encode()


_ANTHROPIC_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def anthropic_error_json_bytes(message: str, *, status: int) -> bytes:
    """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
    kind = _ANTHROPIC_TYPE_BY_STATUS.get(status, "api_error")
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def gateway_error_parts(
    error: ModelyardError, *, anthropic: bool = False
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Status, headers and body of a gateway error (``WWW-Authenticate: Bearer`` on 401)."""
    param = getattr(error, "param", None)
    if anthropic:
        body = anthropic_error_json_bytes(str(error), status=error.http_status)
    else:
        body = error_json_bytes(str(error), status=error.http_status, code=error.code, param=param)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if error.http_status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    retry_after = getattr(error, "retry_after_seconds", None)
    if retry_after:
        headers.append((b"retry-after", str(retry_after).encode()))
    return error.http_status, headers, body


def gateway_error_response(error: ModelyardError) -> Response:
    """The gateway error as a Starlette response."""
    status, headers, body = gateway_error_parts(error)
    response = Response(body, status_code=status)
    response.raw_headers = headers
    return response


def sse_error_event(message: str, *, code: str, status: int = 502) -> bytes:
    """One SSE event carrying an error in OpenAI's shape (ends with the blank line)."""
    return b"data: " + error_json_bytes(message, status=status, code=code) + b"\n\n"


def engine_error_in_openai_shape(payload: dict[str, Any], *, status: int) -> dict[str, Any] | None:
    """An engine's error object in OpenAI's shape; None when ``payload`` is not an error.

    Engines disagree: vLLM sends ``{"error": {...}}`` (older: ``{"object": "error", "message"...}``),
    transformers serve ``{"error": "text"}``, FastAPI ``{"detail": ...}``.
    """
    error = payload.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        shaped = {
            "message": message if isinstance(message, str) else json.dumps(error),
            "type": error.get("type") or error_type_for(status),
            "param": error.get("param"),
            "code": error.get("code"),
        }
        return {"error": shaped}
    if isinstance(error, str):
        return openai_error(error, status=status, code=None)
    if payload.get("object") == "error" and isinstance(payload.get("message"), str):
        shaped = openai_error(payload["message"], status=status, code=payload.get("code"))
        shaped["error"]["type"] = payload.get("type") or shaped["error"]["type"]
        shaped["error"]["param"] = payload.get("param")
        return shaped
    if "detail" in payload and len(payload) == 1:
        detail = payload["detail"]
        return openai_error(
            detail if isinstance(detail, str) else json.dumps(detail), status=status, code=None
        )
    return None
