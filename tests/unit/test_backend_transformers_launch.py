"""The built-in transformers version, rendered as is, starts a real engine that answers.

A real child process on loopback with a tiny random Qwen3 model in a directory whose name has a
space (it must stay one argument): the session's ``tiny_engine`` (``tests/tiny_engine.py``), which
other tests share.
"""

from __future__ import annotations

import httpx
import pytest

from modelyard.testing.http_clients import shared_tls_context
from tiny_engine import TinyEngine

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_rendered_transformers_engine_answers_a_chat_request_for_the_model_path(
    tiny_engine: TinyEngine,
) -> None:
    assert " " in tiny_engine.model_path
    messages = [{"role": "user", "content": "hi"}]
    request = {"model": tiny_engine.model_path, "messages": messages, "max_tokens": 3}
    response = httpx.post(
        f"{tiny_engine.base_url}/v1/chat/completions", json=request, timeout=60, verify=shared_tls_context()
    )
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 3
