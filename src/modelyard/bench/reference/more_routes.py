"""The reference server's other OpenAI-style routes, in the shapes vLLM's server gives them.

``/v1/responses`` (the Responses API), ``/v1/messages`` and ``/v1/messages/count_tokens``
(Anthropic's Messages API), ``/v1/rerank``, ``/v1/score`` and ``/v1/audio/transcriptions`` /
``translations`` (a multipart form), streamed where the real ones stream, each with the usage
the real ones report (``input_tokens``/``output_tokens``, ``total_tokens``, audio duration).
Timings follow the same schedule as chat answers. Served by the vLLM and SGLang flavors (both
engines have these routes; SGLang has no translations); transformers serve has responses and
transcriptions only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.datastructures import UploadFile
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from modelyard.bench.reference.config import ReferenceConfig

WORDS = (" the", " of", " and", " to", " in", " is", " it", " that")


def _words(count: int) -> list[str]:
    return [WORDS[index % len(WORDS)] for index in range(count)]


def _count(text: str) -> int:
    return max(1, len(text.split()))


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(
            _text_of(item.get("content", item.get("text", ""))) if isinstance(item, dict) else str(item)
            for item in value
        )
    return ""


def _event(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


class MoreRoutes:
    """The schedule and payloads of the extra routes for one reference server."""

    def __init__(self, config: ReferenceConfig) -> None:
        self.config = config

    async def _tokens(self, count: int) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        for index, word in enumerate(_words(count)):
            due = started + (self.config.ttft_ms + index * self.config.itl_ms) / 1000
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            yield word

    def _output_tokens(self, body: dict[str, Any], *names: str) -> int:
        for name in names:
            value = body.get(name)
            if isinstance(value, int) and value > 0:
                return value
        return self.config.output_tokens

    # -- /v1/responses ------------------------------------------------------------------------------

    async def responses(self, body: dict[str, Any]) -> Response:
        model = str(body.get("model"))
        input_tokens = _count(_text_of(body.get("instructions", "")) + " " + _text_of(body.get("input", "")))
        output_tokens = self._output_tokens(body, "max_output_tokens")
        response_id, item_id = f"resp_{uuid.uuid4().hex}", f"msg_{uuid.uuid4().hex}"

        def envelope(status: str, text: str, usage: dict[str, int] | None) -> dict[str, Any]:
            content = [{"type": "output_text", "text": text, "annotations": []}] if text else []
            message = {
                "type": "message",
                "id": item_id,
                "role": "assistant",
                "status": status,
                "content": content,
            }
            return {
                "id": response_id,
                "object": "response",
                "created_at": 0,
                "model": model,
                "status": status,
                "output": [message] if text else [],
                "usage": usage,
            }

        usage = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        }
        if not body.get("stream"):
            text = "".join([word async for word in self._tokens(output_tokens)])
            return JSONResponse(envelope("completed", text, usage))

        async def stream() -> AsyncIterator[bytes]:
            yield _event(
                "response.created",
                {"type": "response.created", "response": envelope("in_progress", "", None)},
            )
            text = ""
            async for word in self._tokens(output_tokens):
                text += word
                delta = {"type": "response.output_text.delta", "item_id": item_id, "output_index": 0}
                yield _event("response.output_text.delta", {**delta, "content_index": 0, "delta": word})
            completed = {"type": "response.completed", "response": envelope("completed", text, usage)}
            yield _event("response.completed", completed)

        return StreamingResponse(stream(), media_type="text/event-stream")

    # -- /v1/messages -------------------------------------------------------------------------------

    def _anthropic_input(self, body: dict[str, Any]) -> int:
        return _count(_text_of(body.get("system", "")) + " " + _text_of(body.get("messages", [])))

    async def messages(self, body: dict[str, Any]) -> Response:
        model = str(body.get("model"))
        input_tokens = self._anthropic_input(body)
        output_tokens = self._output_tokens(body, "max_tokens")
        message_id = f"msg_{uuid.uuid4().hex}"
        if not body.get("stream"):
            text = "".join([word async for word in self._tokens(output_tokens)])
            return JSONResponse(
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "max_tokens",
                    "stop_sequence": None,
                    "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
                }
            )

        async def stream() -> AsyncIterator[bytes]:
            start: dict[str, Any] = {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": input_tokens, "output_tokens": 0},
            }
            yield _event("message_start", {"type": "message_start", "message": start})
            block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            yield _event("content_block_start", block)
            async for word in self._tokens(output_tokens):
                delta = {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": word},
                }
                yield _event("content_block_delta", delta)
            yield _event("content_block_stop", {"type": "content_block_stop", "index": 0})
            end = {"stop_reason": "max_tokens", "stop_sequence": None}
            usage = {"output_tokens": output_tokens}
            yield _event("message_delta", {"type": "message_delta", "delta": end, "usage": usage})
            yield _event("message_stop", {"type": "message_stop"})

        return StreamingResponse(stream(), media_type="text/event-stream")

    def count_tokens(self, body: dict[str, Any]) -> Response:
        return JSONResponse({"input_tokens": self._anthropic_input(body)})

    # -- /v1/rerank and /v1/score -------------------------------------------------------------------

    @staticmethod
    def _similarity(first: str, second: str) -> float:
        digest = hashlib.sha256(f"{first}\0{second}".encode()).digest()
        return round(int.from_bytes(digest[:4], "big") / 2**32, 6)

    def rerank(self, body: dict[str, Any]) -> Response:
        query = str(body.get("query", ""))
        documents = [
            _text_of(item) if not isinstance(item, str) else item for item in body.get("documents", [])
        ]
        results = [
            {"index": index, "document": {"text": text}, "relevance_score": self._similarity(query, text)}
            for index, text in enumerate(documents)
        ]
        results.sort(key=lambda item: -float(item["relevance_score"]))  # type: ignore[arg-type]
        top_n = body.get("top_n")
        if isinstance(top_n, int) and top_n > 0:
            results = results[:top_n]
        tokens = _count(query) * len(documents) + sum(_count(text) for text in documents)
        return JSONResponse(
            {
                "id": f"rerank-{uuid.uuid4().hex}",
                "model": body.get("model"),
                "usage": {"total_tokens": tokens},
                "results": results,
            }
        )

    def score(self, body: dict[str, Any]) -> Response:
        first = body.get("text_1", body.get("queries", ""))
        second = body.get("text_2", body.get("documents", ""))
        firsts = first if isinstance(first, list) else [first]
        seconds = second if isinstance(second, list) else [second]
        if len(firsts) == 1:
            firsts = firsts * len(seconds)
        data = [
            {"index": index, "object": "score", "score": self._similarity(str(a), str(b))}
            for index, (a, b) in enumerate(zip(firsts, seconds, strict=False))
        ]
        tokens = sum(_count(str(a)) + _count(str(b)) for a, b in zip(firsts, seconds, strict=False))
        return JSONResponse(
            {
                "id": f"score-{uuid.uuid4().hex}",
                "object": "list",
                "created": 0,
                "model": body.get("model"),
                "data": data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
            }
        )

    # -- /v1/audio/* --------------------------------------------------------------------------------

    async def transcription(self, request: Request, served: set[str]) -> Response:
        form = await request.form()
        model = str(form.get("model", ""))
        if model not in served:
            return _unknown_model(model)
        upload = form.get("file")
        audio = await upload.read() if isinstance(upload, UploadFile) else b""
        seconds = round(len(audio) / 32000, 3)  # 16 kHz, 16-bit mono
        words = max(1, len(audio) // 4000)
        if str(form.get("stream", "false")).lower() != "true":
            text = "".join([word async for word in self._tokens(words)]).strip()
            return JSONResponse({"text": text, "usage": {"type": "duration", "seconds": seconds}})

        async def stream() -> AsyncIterator[bytes]:
            async for word in self._tokens(words):
                chunk = {"id": "trsc-x", "object": "transcription.chunk", "created": 0, "model": model}
                chunk["choices"] = [{"delta": {"content": word}, "finish_reason": None}]
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")


class EchoRequestId:
    """Answer with the ``X-Request-Id`` the request carried, as vLLM does with
    ``--enable-request-id-headers`` (plain ASGI: streams pass through untouched)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        given = next((value for name, value in scope.get("headers", []) if name == b"x-request-id"), None)
        if scope["type"] != "http" or given is None:
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", given)]}
            await send(message)

        await self.app(scope, receive, sending)


def _unknown_model(model: object) -> Response:
    error = {
        "message": f"The model `{model}` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    return JSONResponse({"error": error}, status_code=404)


def add_more_routes(app: FastAPI, config: ReferenceConfig) -> None:
    """Register the routes this flavor's engine serves beyond chat, completions and embeddings."""
    routes = MoreRoutes(config)
    served = set(config.served_model_names)

    async def body_of(request: Request) -> dict[str, Any]:
        body = await request.json()
        return body if isinstance(body, dict) else {}

    app.add_middleware(EchoRequestId)

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        body = await body_of(request)
        return (
            await routes.responses(body) if body.get("model") in served else _unknown_model(body.get("model"))
        )

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request) -> Response:
        return await routes.transcription(request, served)

    if config.flavor == "transformers":
        return

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        body = await body_of(request)
        return (
            await routes.messages(body) if body.get("model") in served else _unknown_model(body.get("model"))
        )

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> Response:
        return routes.count_tokens(await body_of(request))

    @app.post("/v1/rerank")
    async def rerank(request: Request) -> Response:
        body = await body_of(request)
        return routes.rerank(body) if body.get("model") in served else _unknown_model(body.get("model"))

    @app.post("/v1/score")
    async def score(request: Request) -> Response:
        body = await body_of(request)
        return routes.score(body) if body.get("model") in served else _unknown_model(body.get("model"))

    if config.flavor == "vllm":

        @app.post("/v1/audio/translations")
        async def translations(request: Request) -> Response:
            return await routes.transcription(request, served)
