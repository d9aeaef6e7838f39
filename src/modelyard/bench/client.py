"""The HTTP side of the benchmark: send one streamed request and record what arrived, and when.

    async with BenchClient(base_url, api_key=None, endpoint="chat") as client:
        record = RequestRecord(request_index=0, prompt_id="p0", scheduled_send_ns=0, actual_send_ns=0)
        await client.send(record, body_bytes, origin_ns=time.perf_counter_ns())

Requests go over one pool of keep-alive connections (``connection.py``: asyncio protocols and
httptools, about a quarter of aiohttp's client CPU per streamed request). Times are
``time.perf_counter_ns()`` (monotonic) relative to the run's origin. A chunk's arrival time is
when the bytes that completed its ``data:`` line came off the socket; several events in one read
share it, as they arrived together.

A chunk counts as generated output when its delta carries content, reasoning (``reasoning`` or
``reasoning_content``) or tool calls; role-only and empty deltas do not. TTFT is the first such
chunk, reasoning included; the time to first content token is the first content chunk. Token
counts come only from ``usage``; per-chunk token counts from cumulative per-chunk usage
(``continuous_usage_stats``) when the engine sends it.
"""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from modelyard.bench.connection import ConnectionClosed, ConnectionPool
from modelyard.bench.records import EndpointKind, RequestRecord

logger = logging.getLogger(__name__)

ERROR_BODY_CHARS = 500

ENDPOINT_PATHS: dict[EndpointKind, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


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
    """Sends benchmark requests over one connection pool and fills their ``RequestRecord``."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        endpoint: EndpointKind = "chat",
        request_timeout_s: float = 600.0,
    ) -> None:
        root = normalize_base_url(base_url)
        self._pool = ConnectionPool(root)
        self.request_path = urlsplit(root).path.rstrip("/") + ENDPOINT_PATHS[endpoint]
        """Where requests go: the base URL's path prefix (without ``/v1``) and the endpoint's path."""
        authorization = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._head = (
            f"POST {self.request_path} HTTP/1.1\r\nHost: {self._pool.host_header}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n{authorization}Content-Length: "
        ).encode()
        self._timeout_s = request_timeout_s

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self._pool.close()

    async def send(
        self, record: RequestRecord, body: bytes, *, origin_ns: int, keep_text: bool = False
    ) -> str:
        """Send ``body``, stream the answer into ``record``; returns the output text when ``keep_text``.

        Never raises for what the server or the network did: failures end up in ``record.error``.
        """
        request = self._head + str(len(body)).encode() + b"\r\n\r\n" + body
        recorder = _StreamRecorder(record, origin_ns, keep_text)
        clock = time.perf_counter_ns
        record.actual_send_ns = clock() - origin_ns
        try:
            await self._pool.request(request, recorder, timeout_s=self._timeout_s)
            recorder.complete()
        except TimeoutError as error:
            record.error = f"timeout: {error}"
        except ConnectionClosed as error:
            if record.error is None:
                record.error = f"stream cut after {len(record.chunk_arrival_ns)} chunks: {error}"
        except OSError as error:
            record.error = f"cannot connect: {error}"
        finally:
            record.end_ns = clock() - origin_ns
        return "".join(recorder.parts or [])


async def probe(url: str, *, api_key: str | None = None, timeout_s: float = 5.0) -> tuple[int, Any] | None:
    """GET a small JSON document (``/v1/models``, ``/version``); None when it does not answer."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.get(url, headers=headers) as response,
        ):
            body = await response.read()
            try:
                return response.status, orjson.loads(body)
            except orjson.JSONDecodeError:
                return response.status, None
    except (aiohttp.ClientError, TimeoutError) as error:
        logger.debug("probe of %s failed: %s", url, error)
        return None
