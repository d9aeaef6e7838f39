"""The HTTP side of the benchmark: send one streamed request and record what arrived, and when.

    async with BenchClient(base_url, api_key=None, endpoint="chat") as client:
        record = RequestRecord(request_index=0, prompt_id="p0", scheduled_send_ns=0, actual_send_ns=0)
        await client.send(record, body_bytes, origin_ns=time.perf_counter_ns())

Requests go over keep-alive connections of the HTTP/1.1 client the gateway uses too
(``modelyard/http_client.py``: asyncio protocols and httptools, about a quarter of aiohttp's
client CPU per streamed request). Times are ``time.perf_counter_ns()`` (monotonic) relative to
the run's origin. A chunk's arrival time is when the bytes that completed its ``data:`` line came
off the socket; several events in one read share it, as they arrived together.

A chunk counts as generated output when its delta carries content, reasoning (``reasoning`` or
``reasoning_content``) or tool calls; role-only and empty deltas do not. TTFT is the first such
chunk, reasoning included; the time to first content token is the first content chunk. Token
counts come only from ``usage``; per-chunk token counts from cumulative per-chunk usage
(``continuous_usage_stats``) when the engine sends it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import orjson

from modelyard.bench.records import EndpointKind, RequestRecord
from modelyard.errors import InvalidInput
from modelyard.http_client import (
    AnswerBroken,
    ClosedBeforeAnswer,
    Http1Client,
    Http1Response,
    ServerUnreachable,
)

logger = logging.getLogger(__name__)

ERROR_BODY_CHARS = 500

ENDPOINT_PATHS: dict[EndpointKind, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
CONNECT_TIMEOUT_S = 30.0
# Idle keep-alive connections are not reused after this long (uvicorn closes them after 5 s).
KEEPALIVE_EXPIRY_S = 4.0


def normalize_base_url(base_url: str) -> str:
    """``http://host:8000``, ``http://host:8000/`` and ``http://host:8000/v1`` all mean the same server."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class _StreamRecorder:
    """The response sink of one request: parses server-sent events into its ``RequestRecord``."""

    def __init__(self, record: RequestRecord, origin_ns: int, keep_text: bool) -> None:
        self.record = record
        self.origin_ns = origin_ns
        self.parts: list[str] | None = [] if keep_text else None
        self.status = 0
        self.error_body = b""
        self.pending = b""
        self.cumulative_tokens = 0
        self.finished = False
        self.failed = False

    def on_status(self, status: int) -> None:
        self.status = status
        self.record.http_status = status

    def on_body(self, data: bytes, arrived_ns: int) -> None:
        if self.status != 200:
            if len(self.error_body) < ERROR_BODY_CHARS:
                self.error_body += data
            return
        if self.failed:
            return
        buffer = self.pending + data if self.pending else data
        lines = buffer.split(b"\n")
        self.pending = lines.pop()
        for line in lines:
            if line.startswith(b"data:"):
                self._event(line[5:].strip(), arrived_ns - self.origin_ns)

    def _event(self, payload: bytes, arrived_ns: int) -> None:
        record = self.record
        if payload == b"[DONE]":
            record.saw_done = True
            return
        try:
            event: Any = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self._stop(f"malformed stream event: {payload[:200].decode(errors='replace')}")
            return
        if not isinstance(event, dict):
            return
        if ("error" in event or event.get("object") == "error") and not event.get("choices"):
            detail = orjson.dumps(event.get("error", event)).decode()
            self._stop(f"error event in the stream: {detail[:ERROR_BODY_CHARS]}")
            return
        usage = event.get("usage")
        chunk_tokens: int | None = None
        if usage:
            completion = usage.get("completion_tokens")
            record.usage_prompt_tokens = usage.get("prompt_tokens")
            record.usage_completion_tokens = completion
            details = usage.get("completion_tokens_details") or {}
            if details.get("reasoning_tokens") is not None:
                record.usage_reasoning_tokens = details["reasoning_tokens"]
            if isinstance(completion, int):
                chunk_tokens = completion - self.cumulative_tokens
                self.cumulative_tokens = completion
        choices = event.get("choices")
        if not choices:
            return
        choice = choices[0]
        if choice.get("finish_reason"):
            record.finish_reason = choice["finish_reason"]
            self.finished = True
        delta = choice.get("delta")
        if delta is None:
            content = choice.get("text")
            reasoning = tools = None
        else:
            content = delta.get("content")
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            tools = delta.get("tool_calls")
        if not (content or reasoning or tools):
            return
        record.chunk_arrival_ns.append(arrived_ns)
        record.chunk_tokens.append(chunk_tokens)
        if record.first_chunk_ns is None:
            record.first_chunk_ns = arrived_ns
        if reasoning:
            record.reasoning_chunk_count += 1
            record.reasoning_chars += len(reasoning)
        if content or tools:
            if record.first_content_ns is None:
                record.first_content_ns = arrived_ns
            if content:
                record.output_chars += len(content)
        if self.parts is not None:
            self.parts.append((reasoning or "") + (content or ""))

    def _stop(self, error: str) -> None:
        self.failed = True
        self.record.error = error

    def complete(self) -> None:
        """The response ended: decide whether the stream was whole."""
        record = self.record
        if record.error is not None:
            return
        if self.status != 200:
            text = self.error_body.decode(errors="replace")[:ERROR_BODY_CHARS]
            record.error = f"HTTP {self.status}: {text}"
        elif not self.finished and not record.saw_done:
            record.error = f"stream ended after {len(record.chunk_arrival_ns)} chunks without a finish_reason"


class BenchClient:
    """Sends benchmark requests over keep-alive connections and fills their ``RequestRecord``."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        endpoint: EndpointKind = "chat",
        request_timeout_s: float = 600.0,
    ) -> None:
        root = normalize_base_url(base_url)
        parts = urlsplit(root)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(
                f"base URL {base_url!r} is not an http:// or https:// URL", hint="http://host:8000"
            )
        self._root = root
        self.request_path = parts.path.rstrip("/") + ENDPOINT_PATHS[endpoint]
        """Where requests go: the base URL's path prefix (without ``/v1``) and the endpoint's path."""
        self._headers = [(b"content-type", b"application/json"), (b"accept", b"text/event-stream")]
        if api_key:
            self._headers.append((b"authorization", f"Bearer {api_key}".encode()))
        self._timeout_s = request_timeout_s
        self._http = Http1Client(
            connect_timeout_s=CONNECT_TIMEOUT_S,
            read_timeout_s=request_timeout_s,
            keepalive_expiry_s=KEEPALIVE_EXPIRY_S,
            stamp_arrivals=True,
        )
        self._started = False

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self._http.close()

    async def send(
        self, record: RequestRecord, body: bytes, *, origin_ns: int, keep_text: bool = False
    ) -> str:
        """Send ``body``, stream the answer into ``record``; returns the output text when ``keep_text``.

        Never raises for what the server or the network did: failures end up in ``record.error``.
        """
        if not self._started:
            self._http.start()
            self._started = True
        recorder = _StreamRecorder(record, origin_ns, keep_text)
        clock = time.perf_counter_ns
        record.actual_send_ns = clock() - origin_ns
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._exchange(body, recorder)
            recorder.complete()
        except TimeoutError:
            record.error = f"timeout: no complete answer within {self._timeout_s:g} s"
        except (ClosedBeforeAnswer, AnswerBroken) as error:
            if record.error is None:
                record.error = f"stream cut after {len(record.chunk_arrival_ns)} chunks: {error}"
        except ServerUnreachable as error:
            record.error = f"cannot connect: {error}"
        finally:
            record.end_ns = clock() - origin_ns
        return "".join(recorder.parts or [])

    async def _exchange(self, body: bytes, recorder: _StreamRecorder) -> None:
        try:
            response = await self._http.post(self._root, self.request_path, self._headers, body)
        except ClosedBeforeAnswer:
            # A keep-alive connection the server had closed while idle: once more on a new one.
            response = await self._http.post(self._root, self.request_path, self._headers, body, fresh=True)
        try:
            recorder.on_status(response.status)
            response.pipe(_ArrivalSink(recorder, response), _nothing)
            while not response.complete:
                await response.wait()
        finally:
            response.release()  # closes the connection unless the answer came whole


class _ArrivalSink:
    """Hands each piece of the body to the recorder with the time its bytes arrived."""

    def __init__(self, recorder: _StreamRecorder, response: Http1Response) -> None:
        self._recorder = recorder
        self._response = response

    def __call__(self, piece: bytes) -> None:
        self._recorder.on_body(piece, self._response.arrived_ns)


def _nothing() -> None:
    pass


async def probe(url: str, *, api_key: str | None = None, timeout_s: float = 5.0) -> tuple[int, Any] | None:
    """GET a small JSON document (``/v1/models``, ``/version``): its status and body (None when
    the body is not JSON); None when it does not answer within ``timeout_s``, all of it."""
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = [(b"authorization", f"Bearer {api_key}".encode())] if api_key else []
    client = Http1Client(connect_timeout_s=timeout_s, read_timeout_s=timeout_s, keepalive_expiry_s=0.0)
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get(f"{parts.scheme}://{parts.netloc}", path, headers)
            try:
                body = await response.read_all()
            finally:
                response.release()
    except (ServerUnreachable, ClosedBeforeAnswer, AnswerBroken, TimeoutError) as error:
        logger.debug("probe of %s failed: %s", url, error)
        return None
    finally:
        await client.close()
    try:
        return response.status, orjson.loads(body)
    except orjson.JSONDecodeError:
        return response.status, None
