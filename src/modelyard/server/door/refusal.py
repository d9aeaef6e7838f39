"""The error body the door sends, readable as both of the server's documented shapes.

The REST API's errors are ``{"error": {message, type, code, hint}}`` and the gateway's are
OpenAI's ``{"error": {message, type, param, code}}``; a refusal at the door happens before the
route is known to either, so it carries all five fields.
"""

from __future__ import annotations

import json

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    413: "invalid_request_error",
    431: "invalid_request_error",
    429: "rate_limit_error",
}


def refusal_body(status: int, message: str, code: str, hint: str | None = None) -> bytes:
    error = {
        "message": message,
        "type": _TYPE_BY_STATUS.get(status, "invalid_request_error" if status < 500 else "server_error"),
        "param": None,
        "code": code,
        "hint": hint,
    }
    return json.dumps({"error": error}).encode()
