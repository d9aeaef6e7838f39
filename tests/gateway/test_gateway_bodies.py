"""Whole responses: usage read without parsing everything, reasoning mirrored, errors reshaped."""

from __future__ import annotations

import json

from modelyard.server.gateway.bodies import normalise_error_body, normalise_success_body
from modelyard.server.gateway.model_names import ModelNameRewrite
from modelyard.server.gateway.usage import TokenUsage, usage_from_body


def test_usage_is_read_from_the_end_of_the_body() -> None:
    body = (
        b'{"choices":[{"message":{"content":"\\"usage\\": 5"}}],'
        b'"usage":{"prompt_tokens":9,"completion_tokens":4}}'
    )
    assert usage_from_body(body) == TokenUsage(prompt_tokens=9, completion_tokens=4)


def test_embedding_usage_has_no_completion_tokens() -> None:
    body = json.dumps({"data": [{"embedding": [0.1] * 8}], "usage": {"prompt_tokens": 3, "total_tokens": 3}})
    assert usage_from_body(body.encode()) == TokenUsage(prompt_tokens=3, completion_tokens=0)


def test_a_body_without_usage_reports_none() -> None:
    assert usage_from_body(b'{"choices":[]}') is None
    assert usage_from_body(b'{"choices":[],"usage":null}') is None


def test_success_body_without_changes_is_passed_byte_for_byte() -> None:
    body = b'{"model":"demo","choices":[{"message":{"content":"hi"}}]}'
    assert normalise_success_body(body, None) == (body, None)


def test_success_body_gets_deployment_name_and_both_reasoning_fields() -> None:
    body = json.dumps(
        {
            "model": "/models/q",
            "choices": [{"message": {"content": "hi", "reasoning_content": "hmm"}}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1},
        }
    ).encode()
    out, usage = normalise_success_body(body, ModelNameRewrite.between("/models/q", "q"))
    payload = json.loads(out)
    assert payload["model"] == "q"
    assert payload["choices"][0]["message"]["reasoning"] == "hmm"
    assert usage == TokenUsage(prompt_tokens=2, completion_tokens=1)


def test_sglang_error_body_is_reshaped() -> None:
    body = json.dumps(
        {"object": "error", "message": "too long", "type": "BadRequestError", "param": None, "code": 400}
    )
    error = json.loads(normalise_error_body(body.encode(), 400))["error"]
    assert error == {"message": "too long", "type": "BadRequestError", "param": None, "code": 400}


def test_plain_text_error_body_becomes_an_openai_error() -> None:
    error = json.loads(normalise_error_body(b"Internal Server Error", 500))["error"]
    assert error["message"] == "Internal Server Error"
    assert error["type"] == "server_error"


def test_fastapi_detail_error_is_reshaped() -> None:
    error = json.loads(normalise_error_body(b'{"detail":"Not Found"}', 404))["error"]
    assert error["message"] == "Not Found"
    assert error["type"] == "not_found_error"
