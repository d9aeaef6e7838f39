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
from typing import Literal

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
