"""When is a starting engine ready to take traffic?

Ready means: the backend's health path answers 200, and one tiny chat request succeeds. Engines
differ before that point (vLLM refuses connections until loaded; SGLang answers 503 while it
warms up; transformers serve answers 200 before it has loaded anything), so the chat request is
what proves the model is loaded. The verification suite runs after that (``modelyard.doctor.verify``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import httpx

logger = logging.getLogger(__name__)

HEALTH_POLL_INTERVAL_SECONDS = 0.5
TINY_CHAT_TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True)
class ReadinessTarget:
    base_url: str
    health_path: str
    served_model_name: str
    # Sent with every request (the engine's own key, when it asks for one).
    headers: dict[str, str] = field(default_factory=dict, repr=False)


async def health_answers(client: httpx.AsyncClient, target: ReadinessTarget) -> bool:
    try:
        response = await client.get(target.base_url + target.health_path, timeout=5.0, headers=target.headers)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


async def tiny_chat(client: httpx.AsyncClient, target: ReadinessTarget) -> str | None:
    """One chat request of one token. None when it succeeded; otherwise why it failed."""
    body = {
        "model": target.served_model_name,
        "messages": [{"role": "user", "content": "Say OK."}],
        "max_tokens": 1,
        "stream": False,
    }
    try:
        response = await client.post(
            target.base_url + "/v1/chat/completions",
            json=body,
            timeout=TINY_CHAT_TIMEOUT_SECONDS,
            headers=target.headers,
        )
    except httpx.HTTPError as error:
        return f"tiny chat request failed: {type(error).__name__}: {error}"
    if response.status_code != 200:
        return f"tiny chat request answered HTTP {response.status_code}: {response.text[:300]}"
    try:
        choices = response.json().get("choices")
    except ValueError:
        return "tiny chat request answered with a body that is not JSON"
    if not choices:
        return "tiny chat request answered without choices"
    return None
