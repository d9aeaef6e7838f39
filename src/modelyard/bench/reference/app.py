"""The reference server's HTTP application: OpenAI-compatible routes with exactly known timings.

Generated text is a fixed cycle of common English words, one word per token, so a local
tokenizer re-counts it closely. A prompt's token count is its number of whitespace-separated
words (at least 1), the same count ``/tokenize`` returns, so a client can build prompts of exact
lengths against it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Send

from modelyard.bench.reference.config import ReferenceConfig
from modelyard.bench.reference.engine_metrics import EngineMetrics
from modelyard.bench.reference.more_routes import add_more_routes

logger = logging.getLogger(__name__)

WORDS = (" the", " of", " and", " to", " in", " is", " it", " that", " was", " for", " on", " are")
ENGINE_VERSIONS = {"vllm": "0.25.0", "sglang": "0.5.17", "transformers": "5.24.0"}


class _CutStream(Exception):
    """Raised inside a stream to drop the connection before the stream ends (``cut_after_chunks``)."""


class _CuttableStreamingResponse(StreamingResponse):
    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except _CutStream:
            return  # the server closes the connection without ending the chunked body
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def count_prompt_tokens(text: str) -> int:
    """The reference tokenizer: one token per whitespace-separated word, at least one."""
    return max(1, len(text.split()))


def _message_text(messages: Any) -> str:
    parts: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "\n".join(parts)


def _prompt_tokens(body: dict[str, Any]) -> int:
    if "messages" in body:
        return count_prompt_tokens(_message_text(body["messages"]))
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        if prompt and all(isinstance(item, int) for item in prompt):
            return len(prompt)
        return sum(count_prompt_tokens(str(item)) for item in prompt)
    return count_prompt_tokens(str(prompt))


class ReferenceEngine:
    """The state behind the routes: the concurrency limit, readiness, and the engine metrics."""

    def __init__(self, config: ReferenceConfig) -> None:
        self.config = config
        self.metrics = EngineMetrics(config)
        self.ready = config.flavor != "sglang" or config.startup_delay_s <= 0
        self._slots = asyncio.Semaphore(config.max_concurrency)
        self._running = 0
        self._waiting = 0
        self._admitted = 0

    # -- errors in the engine's shape -------------------------------------------------------------

    def error(self, status: int, message: str, error_type: str, param: str | None = None) -> JSONResponse:
        if self.config.flavor == "sglang":
            body: dict[str, Any] = {
                "object": "error",
                "message": message,
                "type": error_type,
                "param": param,
                "code": status,
            }
        else:
            body = {"error": {"message": message, "type": error_type, "param": param, "code": status}}
        return JSONResponse(body, status_code=status)

    def check_request(self, request: Request, body: dict[str, Any]) -> JSONResponse | None:
        """The refusal a real engine would give this request, or None when it is acceptable."""
        expected = f"Bearer {self.config.api_key}"
        if self.config.api_key is not None and request.headers.get("authorization", "") != expected:
            return self.error(401, "Unauthorized", "Unauthorized")
        model = body.get("model")
        if model not in self.config.served_model_names:
            return self.error(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        return None

    # -- admission and timing --------------------------------------------------------------------

    async def _admit(self) -> None:
        self._admitted += 1
        if self._admitted <= self.config.slow_requests:  # before a slot: a cancel leaks nothing
            await asyncio.sleep(self.config.slow_request_extra_ms / 1000.0)
        self._waiting += 1
        self.metrics.waiting.set(self._waiting)
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
            self.metrics.waiting.set(self._waiting)
        self._running += 1
        self.metrics.running.set(self._running)

    def _release(self, tokens_held: int) -> None:
        self._running -= 1
        self.metrics.running.set(self._running)
        self.metrics.add_tokens_in_use(-tokens_held)
        self._slots.release()

    def _chunk_plan(self, output_tokens: int) -> list[int]:
        """The index of the last token in each streamed chunk: the first token alone, then groups."""
        plan = [0]
        step = self.config.tokens_per_chunk
        last = 0
        while last < output_tokens - 1:
            last = min(last + step, output_tokens - 1)
            plan.append(last)
        return plan

    def _due_s(self, started_s: float, token_index: int) -> float:
        return started_s + (self.config.ttft_ms + token_index * self.config.itl_ms) / 1000.0

    def _text(self, first: int, last: int) -> tuple[str, str]:
        """(reasoning, content) for tokens first..last inclusive."""
        boundary = self.config.reasoning_tokens
        reasoning = "".join(WORDS[index % len(WORDS)] for index in range(first, min(last + 1, boundary)))
        content = "".join(WORDS[index % len(WORDS)] for index in range(max(first, boundary), last + 1))
        return reasoning, content

    def _usage(self, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    # -- generation ------------------------------------------------------------------------------

    async def generate_stream(
        self,
        *,
        chat: bool,
        model: str,
        prompt_tokens: int,
        output_tokens: int,
        stream_options: dict[str, Any],
        base_request_id: str | None = None,
    ) -> AsyncIterator[bytes]:
        config = self.config
        flavor = config.flavor
        include_usage = not config.omit_usage and (
            flavor == "transformers" or bool(stream_options.get("include_usage"))
        )
        continuous_usage = include_usage and bool(stream_options.get("continuous_usage_stats"))
        request_id = ("chatcmpl-" if chat else "cmpl-") + (base_request_id or uuid.uuid4().hex)
        created = int(time.time())
        object_name = "chat.completion.chunk" if chat else "text_completion"
        head = (
            f'{{"id":"{request_id}","object":"{object_name}","created":{created},"model":{json.dumps(model)},'
        )
        reasoning_field = config.reasoning_field

        def event(choice: dict[str, Any] | None, usage: dict[str, Any] | None) -> bytes:
            choices = _compact([choice]) if choice is not None else "[]"
            tail = f',"usage":{_compact(usage)}' if usage is not None else ""
            return f'data: {head}"choices":{choices}{tail}}}\n\n'.encode()

        await self._admit()
        self.metrics.add_tokens_in_use(prompt_tokens + output_tokens)
        self.metrics.prompt_tokens.inc(prompt_tokens)
        loop = asyncio.get_running_loop()
        started_s = loop.time()
        try:
            plan = self._chunk_plan(output_tokens)
            first = 0
            for chunk_number, last in enumerate(plan, start=1):
                delay_s = self._due_s(started_s, last) - loop.time()
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                reasoning, content = self._text(first, last)
                finished = last == output_tokens - 1
                finish_reason = "length" if finished else None
                if chat:
                    delta: dict[str, Any] = {}
                    if reasoning:
                        delta[reasoning_field] = reasoning
                    if content or not reasoning:
                        delta["content"] = content
                    choice: dict[str, Any] = {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                else:
                    choice = {
                        "index": 0,
                        "text": reasoning + content,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                usage = None
                if continuous_usage or (finished and include_usage and flavor == "transformers"):
                    usage = self._usage(prompt_tokens, last + 1)
                payload = event(choice, usage)
                if chunk_number == 1:
                    self.metrics.ttft.observe(loop.time() - started_s)
                    if chat and flavor != "transformers":
                        role = {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                        payload = event(role, None) + payload
                else:
                    self.metrics.itl.observe((last - first + 1) * config.itl_ms / 1000.0)
                self.metrics.count_generated(last - first + 1)
                yield payload
                if config.cut_after_chunks is not None and chunk_number >= config.cut_after_chunks:
                    logger.info("cutting the stream of %s after %d chunks", request_id, chunk_number)
                    raise _CutStream
                first = last + 1
            tail = b""
            if include_usage and flavor != "transformers":
                tail += event(None, self._usage(prompt_tokens, output_tokens))
            if not config.omit_done and flavor != "transformers":
                tail += b"data: [DONE]\n\n"
            if tail:
                yield tail
            self.metrics.e2e.observe(loop.time() - started_s)
            self.metrics.success.inc()
        finally:
            self._release(prompt_tokens + output_tokens)

    async def generate_whole(
        self,
        *,
        chat: bool,
        model: str,
        prompt_tokens: int,
        output_tokens: int,
        base_request_id: str | None = None,
    ) -> dict[str, Any]:
        await self._admit()
        self.metrics.add_tokens_in_use(prompt_tokens + output_tokens)
        loop = asyncio.get_running_loop()
        started_s = loop.time()
        try:
            delay_s = self._due_s(started_s, output_tokens - 1) - loop.time()
            if delay_s > 0:
                await asyncio.sleep(delay_s)
        finally:
            self._release(prompt_tokens + output_tokens)
        self.metrics.prompt_tokens.inc(prompt_tokens)
        self.metrics.count_generated(output_tokens)
        self.metrics.e2e.observe(loop.time() - started_s)
        self.metrics.success.inc()
        reasoning, content = self._text(0, output_tokens - 1)
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            message[self.config.reasoning_field] = reasoning or None
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "length",
            }
        else:
            choice = {"index": 0, "text": reasoning + content, "logprobs": None, "finish_reason": "length"}
        body: dict[str, Any] = {
            "id": ("chatcmpl-" if chat else "cmpl-") + (base_request_id or uuid.uuid4().hex),
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
        }
        if not self.config.omit_usage:
            body["usage"] = self._usage(prompt_tokens, output_tokens)
        return body


def _embedding(text: str, dimensions: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    while len(digest) < dimensions:
        digest += hashlib.sha256(digest).digest()
    values = [(byte - 127.5) / 127.5 for byte in digest[:dimensions]]
    norm = math.sqrt(sum(value * value for value in values)) or 1.0
    return [value / norm for value in values]


def create_reference_app(engine: ReferenceEngine) -> FastAPI:
    """The FastAPI application of one reference server."""
    config = engine.config
    app = FastAPI(title="modelyard reference server", docs_url=None, redoc_url=None, openapi_url=None)

    async def read_body(request: Request) -> dict[str, Any] | JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return engine.error(400, "The request body is not valid JSON.", "BadRequestError")
        if not isinstance(body, dict):
            return engine.error(400, "The request body must be a JSON object.", "BadRequestError")
        refusal = engine.check_request(request, body)
        return refusal if refusal is not None else body

    async def generate(request: Request, chat: bool) -> Response:
        body = await read_body(request)
        if isinstance(body, JSONResponse):
            return body
        requested = body.get("max_completion_tokens") or body.get("max_tokens")
        if requested is not None and (not isinstance(requested, int) or requested < 1):
            return engine.error(
                400, f"max_tokens must be a positive integer, got {requested!r}.", "BadRequestError"
            )
        output_tokens = requested or config.output_tokens
        prompt_tokens = _prompt_tokens(body)
        if prompt_tokens + output_tokens > config.max_model_len:
            return engine.error(
                400,
                f"This model's maximum context length is {config.max_model_len} tokens. However, you "
                f"requested {prompt_tokens + output_tokens} tokens ({prompt_tokens} in the messages, "
                f"{output_tokens} in the completion). Reduce the length of the messages or completion.",
                "BadRequestError",
            )
        model = str(body["model"])
        # vLLM takes the request's X-Request-Id as the base of its own id (chatcmpl-<id>).
        base_request_id = request.headers.get("x-request-id") if config.flavor == "vllm" else None
        if body.get("stream"):
            options = body.get("stream_options") or {}
            stream = engine.generate_stream(
                chat=chat,
                model=model,
                prompt_tokens=prompt_tokens,
                output_tokens=output_tokens,
                stream_options=options if isinstance(options, dict) else {},
                base_request_id=base_request_id,
            )
            return _CuttableStreamingResponse(stream, media_type="text/event-stream")
        whole = await engine.generate_whole(
            chat=chat,
            model=model,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            base_request_id=base_request_id,
        )
        return JSONResponse(whole)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generate(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, chat=False)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        body = await read_body(request)
        if isinstance(body, JSONResponse):
            return body
        inputs = body.get("input", "")
        texts = [str(item) for item in inputs] if isinstance(inputs, list) else [str(inputs)]
        tokens = sum(count_prompt_tokens(text) for text in texts)
        data = [
            {
                "object": "embedding",
                "index": index,
                "embedding": _embedding(text, config.embedding_dimensions),
            }
            for index, text in enumerate(texts)
        ]
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        owner = {"vllm": "vllm", "sglang": "sglang", "transformers": "huggingface"}[config.flavor]
        data = []
        for name in config.served_model_names:
            entry: dict[str, Any] = {
                "id": name,
                "object": "model",
                "created": int(time.time()),
                "owned_by": owner,
            }
            if config.flavor != "transformers":
                entry.update(
                    {"root": config.model_path, "parent": None, "max_model_len": config.max_model_len}
                )
            data.append(entry)
        return JSONResponse({"object": "list", "data": data})

    @app.get("/health")
    async def health() -> Response:
        if not engine.ready:
            return Response(status_code=503)
        return Response(status_code=200)

    add_more_routes(app, config)

    if config.flavor in ("vllm", "sglang"):

        @app.get("/metrics")
        async def metrics() -> Response:
            return Response(engine.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

        @app.post("/tokenize")
        async def tokenize(request: Request) -> Response:
            body = await request.json()
            text = _message_text(body["messages"]) if "messages" in body else str(body.get("prompt", ""))
            count = count_prompt_tokens(text)
            return JSONResponse(
                {"count": count, "max_model_len": config.max_model_len, "tokens": list(range(count))}
            )

    if config.flavor == "vllm":

        @app.get("/version")
        async def version() -> JSONResponse:
            return JSONResponse({"version": ENGINE_VERSIONS["vllm"]})

    if config.flavor == "sglang":

        @app.get("/get_server_info")
        async def server_info() -> JSONResponse:
            return JSONResponse(
                {
                    "version": ENGINE_VERSIONS["sglang"],
                    "model_path": config.model_path,
                    "max_total_num_tokens": config.kv_cache_tokens,
                    "context_length": config.max_model_len,
                }
            )

    return app
