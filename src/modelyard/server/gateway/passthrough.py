"""Answers relayed as the engine sent them, with the token usage read on the way.

For the routes whose answers the gateway does not normalise (``/v1/responses``, ``/v1/messages``,
``/v1/rerank``, ``/v1/score``, ``/v1/audio/*``): bytes go to the client unchanged, streamed or
not. ``UsageReader`` looks at each complete SSE event that mentions usage:

- Responses API: the ``response.completed`` (or ``.incomplete``/``.failed``) event carries
  ``response.usage`` with ``input_tokens`` / ``output_tokens``;
- Anthropic Messages: ``message_start`` carries ``message.usage.input_tokens``, each
  ``message_delta`` the output tokens so far (``usage.output_tokens``);
- anything else: a top-level ``usage`` (vLLM's streamed transcriptions, for example).

A whole body is read the same way (``usage_from_body``). Nothing here is on the path of the
common chat stream.
"""

from __future__ import annotations

from typing import Any

import orjson

from modelyard.server.gateway.usage import USAGE_MARKER, TokenUsage

_INPUT_MARKER = b'"input_tokens"'
_EVENT_END = b"\n\n"
_MAX_PARTIAL_EVENT_BYTES = 65536


class UsageReader:
    """Reads token usage out of a passed-through SSE stream; never changes a byte.

    Usage::

        reader = UsageReader()
        for chunk in engine_chunks:
            reader.feed(chunk)       # and send ``chunk`` to the client as it is
        reader.usage                 # TokenUsage or None
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._input_tokens: int | None = None
        self._output_tokens = 0
        self.usage: TokenUsage | None = None

    def feed(self, data: bytes) -> None:
        if self._buffer:
            data = self._buffer + data
            self._buffer = b""
        if USAGE_MARKER not in data and _INPUT_MARKER not in data:
            # Keep only what may be the start of an event still to come (a usage event is small).
            end = data.rfind(_EVENT_END)
            rest = data[end + 2 :] if end >= 0 else data
            self._buffer = rest if len(rest) <= _MAX_PARTIAL_EVENT_BYTES else rest[-4096:]
            return
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        events = data.split(_EVENT_END)
        self._buffer = events.pop()
        for event in events:
            if USAGE_MARKER in event or _INPUT_MARKER in event:
                self._read_event(event)

    def _read_event(self, event: bytes) -> None:
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                try:
                    payload = orjson.loads(line[5:])
                except orjson.JSONDecodeError:
                    continue
                if isinstance(payload, dict):
                    self._read_payload(payload)

    def _read_payload(self, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        if kind == "message_start":
            message = payload.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict) and type(usage.get("input_tokens")) is int:
                self._input_tokens = usage["input_tokens"]
                output = usage.get("output_tokens")
                self._output_tokens = output if type(output) is int else 0
                self._remember()
            return
        if kind == "message_delta":
            usage = payload.get("usage")
            if isinstance(usage, dict) and type(usage.get("output_tokens")) is int:
                self._output_tokens = usage["output_tokens"]
                if type(usage.get("input_tokens")) is int:
                    self._input_tokens = usage["input_tokens"]
                self._remember()
            return
        response = payload.get("response")
        if isinstance(kind, str) and kind.startswith("response.") and isinstance(response, dict):
            usage = TokenUsage.from_payload(response.get("usage"))
        else:
            usage = TokenUsage.from_payload(payload.get("usage"))
        if usage is not None:
            self.usage = usage

    def _remember(self) -> None:
        if self._input_tokens is not None:
            self.usage = TokenUsage(prompt_tokens=self._input_tokens, completion_tokens=self._output_tokens)
