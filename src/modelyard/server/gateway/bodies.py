"""Whole (not streamed) engine responses: model name, reasoning and usage, touched as little as
possible.

A successful body is passed through byte for byte unless it needs the model rewrite (a bytes
replace) or carries reasoning (then it is parsed and re-encoded). Usage is read by decoding only
the ``usage`` object. An error body is reshaped to OpenAI's error shape when it is not already.
"""

from __future__ import annotations

import json

from modelyard.server.gateway.errors import engine_error_in_openai_shape, openai_error
from modelyard.server.gateway.json_bytes import compact_json
from modelyard.server.gateway.model_names import ModelNameRewrite
from modelyard.server.gateway.reasoning import REASONING_MARKER, normalise_reasoning
from modelyard.server.gateway.usage import TokenUsage, usage_from_body


def normalise_success_body(
    body: bytes, model_rewrite: ModelNameRewrite | None
) -> tuple[bytes, TokenUsage | None]:
    """The body to send the client, and the usage the engine reported (None: none reported)."""
    if model_rewrite is not None:
        body = model_rewrite.apply(body)
    usage = usage_from_body(body)
    if REASONING_MARKER in body:
        try:
            payload = json.loads(body)
        except ValueError:
            return body, usage
        if isinstance(payload, dict) and normalise_reasoning(payload):
            body = compact_json(payload)
    return body, usage


def normalise_error_body(body: bytes, status: int) -> bytes:
    """An engine's error response as ``{"error": {message, type, param, code}}``."""
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    shaped = engine_error_in_openai_shape(payload, status=status) if isinstance(payload, dict) else None
    if shaped is None:
        text = body.decode("utf-8", errors="replace").strip()[:2000] or f"the engine answered HTTP {status}"
        shaped = openai_error(text, status=status, code=None)
    return json.dumps(shaped).encode()
