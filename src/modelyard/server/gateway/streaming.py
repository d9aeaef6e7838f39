"""The engine's Server-Sent Events, relayed to the client event by event.

``SseRelay`` is pure (bytes in, bytes out) so it is tested without a network. For each complete
event it only scans bytes, and parses JSON only when the event carries something to act on:

- reasoning (``"reasoning``): mirrored under both names (``reasoning.py``);
- token counts (``"prompt_tokens"``): kept for metering; the usage-only chunk is dropped when the
  client did not ask for ``stream_options.include_usage`` itself (the gateway asked for it);
- an error object in a non-OpenAI shape: reshaped.

The model name is rewritten with a bytes replace (``model_names.py``). The stream always ends with
``data: [DONE]``: added when the engine omits it (transformers serve does). A stream that ends
before any choice finished and without ``[DONE]`` or usage was cut: the client gets an error event
in OpenAI's shape, then ``[DONE]``.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from modelyard.server.gateway.errors import engine_error_in_openai_shape, sse_error_event
from modelyard.server.gateway.json_bytes import compact_json
from modelyard.server.gateway.model_names import ModelNameRewrite
from modelyard.server.gateway.reasoning import REASONING_MARKER, normalise_reasoning
from modelyard.server.gateway.usage import TokenUsage

DONE_EVENT = b"data: [DONE]"
_EVENT_END = b"\n\n"
_TOKENS_MARKER = b'"prompt_tokens"'
_FINISH_MARKER = b'"finish_reason"'
_ERROR_PREFIXES = (
    b'data: {"error"',
    b'data:{"error"',
    b'data: {"object":"error"',
    b'data: {"object": "error"',
)


def _has_finish_reason(event: bytes) -> bool:
    """Whether some ``"finish_reason"`` in the event has a value other than null."""
    position = event.find(_FINISH_MARKER)
    while position >= 0:
        value = event[position + len(_FINISH_MARKER) : position + len(_FINISH_MARKER) + 8]
        value = value.lstrip(b": ")
        if value and not value.startswith(b"null"):
            return True
        position = event.find(_FINISH_MARKER, position + 1)
    return False


def _encode(payload: dict[str, Any]) -> bytes:
    return b"data: " + compact_json(payload)


class SseRelay:
    """Turns the engine's SSE bytes into the client's, one complete event at a time.

    Usage::

        relay = SseRelay(model_rewrite=None, client_wants_usage=False)
        for chunk in engine_chunks:
            send(relay.feed(chunk))   # complete events only; b"" while one is still partial
        send(relay.end())             # at a clean end: anything left, an error if cut, [DONE]
        # or, when the connection to the engine broke:
        send(relay.cut("the engine closed the connection"))
    """

    def __init__(self, *, model_rewrite: ModelNameRewrite | None, client_wants_usage: bool) -> None:
        self._model_rewrite = model_rewrite
        self._client_wants_usage = client_wants_usage
        self._buffer = b""
        self.usage: TokenUsage | None = None
        self.saw_done = False
        # A choice finished, or the engine sent an error event: the stream is complete without [DONE].
        self.saw_finish = False
        self.interrupted = False

    def feed(self, data: bytes) -> bytes:
        """The events completed by ``data``, ready to send (each ends with a blank line)."""
        if self._passes_whole(data):
            return data
        if self._buffer:
            data = self._buffer + data
            self._buffer = b""
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        if _EVENT_END not in data:
            self._buffer = data
            return b""
        events = data.split(_EVENT_END)
        self._buffer = events.pop()
        out: list[bytes] = []
        for event in events:
            processed = self._process(event)
            if processed is not None:
                out.append(processed)
                out.append(_EVENT_END)
        return b"".join(out)

    def _passes_whole(self, data: bytes) -> bool:
        """Whether ``data`` is whole events that need nothing (the common content chunk): then it
        is sent as it came, scanned a few times in C and never split or copied."""
        if self._buffer or self._model_rewrite is not None or not data.endswith(_EVENT_END) or b"\r" in data:
            return False
        if REASONING_MARKER in data or _TOKENS_MARKER in data or b"[DONE]" in data or b'"error"' in data:
            return False
        if not self.saw_finish and _FINISH_MARKER in data:
            nulls = data.count(b'"finish_reason":null') + data.count(b'"finish_reason": null')
            return nulls == data.count(_FINISH_MARKER)
        return True

    def end(self) -> bytes:
        """The engine ended the response: flush a last unterminated event, then close the stream."""
        tail = self.feed(_EVENT_END) if self._buffer.strip() else b""
        self._buffer = b""
        if self.saw_done:
            return tail
        if not self.saw_finish and self.usage is None:
            return tail + self.cut("the engine ended the stream before the answer finished")
        return tail + DONE_EVENT + _EVENT_END

    def cut(self, message: str) -> bytes:
        """The stream broke: an error event in OpenAI's shape, then ``[DONE]``."""
        self.interrupted = True
        self._buffer = b""
        return sse_error_event(message, code="stream_interrupted") + DONE_EVENT + _EVENT_END

    def _process(self, event: bytes) -> bytes | None:
        if not event.startswith(b"data:"):
            event = event.lstrip(b"\n")
            if not event or not event.startswith(b"data:"):
                # Empty, a comment (": ping") or a field we leave alone (event:, id:, retry:).
                return event or None
        if event.endswith(b"[DONE]"):
            self.saw_done = True
            return event
        if self._model_rewrite is not None:
            event = self._model_rewrite.apply(event)
        if not self.saw_finish and _FINISH_MARKER in event:
            self.saw_finish = _has_finish_reason(event)
        if REASONING_MARKER in event or _TOKENS_MARKER in event or event.startswith(_ERROR_PREFIXES):
            return self._process_parsed(event)
        return event

    def _process_parsed(self, event: bytes) -> bytes | None:
        try:
            payload = orjson.loads(event[5:])
        except orjson.JSONDecodeError:
            try:  # orjson refuses lone surrogates, which Python's json reads
                payload = json.loads(event[5:])
            except ValueError:
                return event
        if not isinstance(payload, dict):
            return event
        changed = False
        shaped_error = engine_error_in_openai_shape(payload, status=502)
        if shaped_error is not None:
            self.saw_finish = True
            return _encode(shaped_error)
        usage = TokenUsage.from_payload(payload.get("usage"))
        if usage is not None:
            self.usage = usage
            if not self._client_wants_usage and payload.get("choices") == []:
                return None
        if normalise_reasoning(payload):
            changed = True
        return _encode(payload) if changed else event
