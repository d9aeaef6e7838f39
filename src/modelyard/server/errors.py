"""Every REST error leaves the server in one JSON shape: ``{"error": {message, type, code, hint}}``.

``install_error_handlers(app)`` maps:

- a ``ModelyardError`` to its ``http_status`` (and any ``details`` it carries, e.g. doctor findings);
- a request that fails validation to 400, naming the field (``body.replicas: ...``);
- a body that is not JSON to 400 ``body is not JSON``;
- Starlette's own HTTP errors (unknown path, wrong method) to the same shape;
- a full disk or database (``store/storage_errors.py``), wherever it is hit, to 507 ``storage_full``;
- anything else a route did not expect to 500 ``internal_error`` in the same shape (never plain
  text), with the traceback in the server log.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from modelyard.errors import ModelyardError
from modelyard.store.storage_errors import is_storage_full

logger = logging.getLogger(__name__)

# The "type" field, by status: OpenAI's vocabulary, so clients that parse one shape parse both.
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}

AUTHENTICATE_HEADER = {"WWW-Authenticate": 'Basic realm="modelyard"'}


def error_body(
    status: int, message: str, code: str, hint: str | None = None, details: Any = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "message": message,
        "type": _TYPE_BY_STATUS.get(status, "server_error"),
        "code": code,
        "hint": hint,
    }
    if details is not None:
        body["details"] = details
    return {"error": body}


def error_response(
    status: int,
    message: str,
    code: str,
    hint: str | None = None,
    details: Any = None,
    retry_after_seconds: int | None = None,
) -> JSONResponse:
    # No Basic challenge for an ended console session: a browser would pop up its login dialog.
    headers = dict(AUTHENTICATE_HEADER) if status == 401 and code != "session_expired" else {}
    if retry_after_seconds is not None:
        headers["Retry-After"] = str(retry_after_seconds)
    return JSONResponse(error_body(status, message, code, hint, details), status_code=status, headers=headers)


def _field_name(location: tuple[Any, ...] | list[Any]) -> str:
    # The first element says where the field is (body, query, path, header): shown apart.
    parts = [str(part) for part in location[1:]]
    return ".".join(parts) or (str(location[0]) if location else "body")


def describe_validation_error(error: RequestValidationError) -> tuple[str, str]:
    """One line naming the first bad field (and how many others), and the error code."""
    problems = list(error.errors())
    if not problems:
        return "the request is not valid", "invalid_input"
    first = problems[0]
    if first.get("type") == "json_invalid":
        return "body is not JSON", "body_not_json"
    location = tuple(first.get("loc", ()))
    field = _field_name(location)
    kind = location[0] if location else "body"
    message = f"{kind} field {field!r}: {first.get('msg', 'is not valid')}"
    if first.get("type") == "missing":
        message = f"{kind} field {field!r} is required"
    if first.get("type") == "extra_forbidden":
        message = f"{kind} field {field!r} is not accepted here"
    if len(problems) > 1:
        message += f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})"
    return message, "invalid_input"


async def _modelyard_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, ModelyardError)
    if error.http_status >= 500:
        logger.error("request failed: %s", error)
    return error_response(
        error.http_status,
        error.message,
        error.code,
        error.hint,
        getattr(error, "details", None),
        getattr(error, "retry_after_seconds", None),
    )


def invalid_field(error: RequestValidationError) -> str | None:
    """The dotted path of the first bad field (``autoscale.target.metric``), for a form that shows
    the error beside it; None when the body is not JSON or no field is named."""
    problems = list(error.errors())
    if not problems or problems[0].get("type") == "json_invalid":
        return None
    location = tuple(problems[0].get("loc", ()))
    return ".".join(str(part) for part in location[1:]) or None


async def _validation_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    message, code = describe_validation_error(error)
    hint = "send a JSON object with Content-Type: application/json" if code == "body_not_json" else None
    field = invalid_field(error)
    return error_response(400, message, code, hint, {"field": field} if field is not None else None)


async def _http_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(
        error.status_code, "http_error"
    )
    response = error_response(error.status_code, str(error.detail), code)
    if error.headers:
        response.headers.update(error.headers)
    return response


def storage_full_response(request: Request) -> JSONResponse:
    context = getattr(request.app.state, "context", None)
    where = f" (data directory {context.settings.data_dir})" if context is not None else ""
    return error_response(
        507,
        "the disk or the database is full: nothing was written",
        "storage_full",
        hint=f"free space on the disk of the database{where}, then try again",
    )


async def _storage_or_unexpected(request: Request, error: Exception) -> JSONResponse:
    """Database and OS errors a route did not handle: a full disk is 507, a number the database
    cannot hold 400, anything else 500."""
    if isinstance(error, DataError):
        return _out_of_range()
    if is_storage_full(error):
        logger.error("%s %s: the disk or the database is full (%s)", request.method, request.url.path, error)
        return storage_full_response(request)
    logger.error("%s %s failed", request.method, request.url.path, exc_info=error)
    return _internal_error()


def _out_of_range() -> JSONResponse:
    return error_response(
        400,
        "a number in the request is out of range",
        "number_out_of_range",
        hint="ids and counts are whole numbers below 2^63",
    )


async def _overflow(_request: Request, _error: Exception) -> JSONResponse:
    # SQLite's driver cannot bind an int past 64 bits (an id of 10^22 in a path, say).
    return _out_of_range()


def _internal_error() -> JSONResponse:
    return error_response(
        500,
        "the server failed on this request",
        "internal_error",
        hint="this is a bug in modelyard; the server log has the details",
    )


async def _unexpected(request: Request, error: Exception) -> JSONResponse:
    # Starlette logs the traceback of what reaches this handler.
    if is_storage_full(error):
        return storage_full_response(request)
    return _internal_error()


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers above on ``app`` (the lead's ``create_app`` calls this once)."""
    app.add_exception_handler(ModelyardError, _modelyard_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(SQLAlchemyError, _storage_or_unexpected)
    app.add_exception_handler(OSError, _storage_or_unexpected)
    app.add_exception_handler(OverflowError, _overflow)
    app.add_exception_handler(Exception, _unexpected)
