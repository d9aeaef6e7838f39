"""An OpenAI-compatible upstream of exact timing that costs little CPU, for the gateway benchmarks.

A stand-in for an engine (a benchmark double, not the project's engine double): token ``k``
(0-based) of an answer leaves at ``arrival + ttft + k * itl``, one token per chunk, scheduled
with one timer per chunk on uvloop; bytes are prebuilt, the HTTP parsing is httptools'. The
project's reference server (FastAPI, one coroutine per stream) cannot drive 256 streams from one
core; this one relays tens of thousands of chunks per second.

Optional prefix-cache model (``--prefill-ms-per-token``): the prompt's words are its tokens, in
blocks of 16; the first token waits ``ttft + uncached_tokens * prefill_ms_per_token``, where the
cached tokens are the longest run of leading blocks this server has seen (an LRU of block
hashes, ``--cache-blocks``). ``/metrics`` gives vLLM's prefix-cache counters.

    python benchmarks/exact_upstream.py --port 8001 --ttft-ms 20 --itl-ms 5 --model ref
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, cast

import httptools
import orjson
import uvloop

WORD = " the"
BLOCK_TOKENS = 16


@dataclass
class Settings:
    model: str
    ttft_s: float
    itl_s: float
    default_tokens: int
    prefill_s_per_token: float
    cache_blocks: int


class PrefixCache:
    """Leading blocks of prompts seen before (an LRU of chained block hashes)."""

    def __init__(self, capacity: int) -> None:
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self._capacity = capacity
        self.queries = 0
        self.hits = 0

    def cached_tokens(self, words: list[str]) -> int:
        digest = b""
        cached = 0
        hashes = []
        for start in range(0, len(words) - len(words) % BLOCK_TOKENS, BLOCK_TOKENS):
            digest = hashlib.blake2b(
                digest + " ".join(words[start : start + BLOCK_TOKENS]).encode(), digest_size=8
            ).digest()
            hashes.append(digest)
        for digest in hashes:
            if digest in self._blocks:
                self._blocks.move_to_end(digest)
                cached += BLOCK_TOKENS
            else:
                break
        for digest in hashes:
            self._blocks[digest] = None
            self._blocks.move_to_end(digest)
        while len(self._blocks) > self._capacity:
            self._blocks.popitem(last=False)
        self.queries += len(words)
        self.hits += cached
        return cached


def _prompt_words(body: dict[str, Any]) -> list[str]:
    messages = body.get("messages")
    if isinstance(messages, list):
        text = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    else:
        text = str(body.get("prompt", ""))
    return text.split()


class Stream(asyncio.Protocol):
    """One client connection: requests one at a time, answers on their exact schedule."""

    def __init__(self, server: UpstreamServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.keep_alive = True
        self.timers: list[asyncio.TimerHandle] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            self._close()

    def connection_lost(self, error: Exception | None) -> None:
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        self.server.route(self, url.split(b"?", 1)[0], body)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def answer(self, status: bytes, content_type: bytes, body: bytes) -> None:
        head = b"HTTP/1.1 " + status + b"\r\ncontent-type: " + content_type
        head += b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
        self._write(head + body)
        if not self.keep_alive:
            self._close()


class UpstreamServer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.cache = PrefixCache(settings.cache_blocks) if settings.prefill_s_per_token > 0 else None
        self.loop = asyncio.get_running_loop()
        model = orjson.dumps(settings.model)
        self.chat_head = (
            b'data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":0,"model":' + model
        )
        self.completion_head = b'data: {"id":"cmpl-x","object":"text_completion","created":0,"model":' + model
        self.requests = 0

    def route(self, stream: Stream, path: bytes, body: bytes) -> None:
        if path in (b"/v1/chat/completions", b"/v1/completions"):
            self.generate(stream, path == b"/v1/chat/completions", body)
        elif path == b"/v1/models":
            data = {
                "object": "list",
                "data": [{"id": self.settings.model, "object": "model", "owned_by": "bench"}],
            }
            stream.answer(b"200 OK", b"application/json", orjson.dumps(data))
        elif path == b"/health":
            stream.answer(b"200 OK", b"text/plain", b"")
        elif path == b"/metrics":
            stream.answer(b"200 OK", b"text/plain; version=0.0.4", self.metrics())
        else:
            stream.answer(b"404 Not Found", b"application/json", b'{"error":{"message":"not found"}}')

    def metrics(self) -> bytes:
        queries = self.cache.queries if self.cache else 0
        hits = self.cache.hits if self.cache else 0
        label = b'{model_name="' + self.settings.model.encode() + b'"}'
        lines = [
            b"# TYPE vllm:prefix_cache_queries counter",
            b"vllm:prefix_cache_queries_total" + label + b" " + str(queries).encode(),
            b"# TYPE vllm:prefix_cache_hits counter",
            b"vllm:prefix_cache_hits_total" + label + b" " + str(hits).encode(),
            b"# TYPE vllm:request_success counter",
            b"vllm:request_success_total" + label + b" " + str(self.requests).encode(),
        ]
        return b"\n".join(lines) + b"\n"

    def generate(self, stream: Stream, chat: bool, raw: bytes) -> None:
        arrived = self.loop.time()
        body = orjson.loads(raw)
        settings = self.settings
        tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or settings.default_tokens)
        words = _prompt_words(body)
        ttft_s = settings.ttft_s
        if self.cache is not None:
            uncached = len(words) - self.cache.cached_tokens(words)
            ttft_s += uncached * settings.prefill_s_per_token
        usage = orjson.dumps(
            {"prompt_tokens": len(words), "completion_tokens": tokens, "total_tokens": len(words) + tokens}
        )
        head = self.chat_head if chat else self.completion_head
        if chat:
            piece = b',"choices":[{"index":0,"delta":{"content":"' + WORD.encode() + b'"},"finish_reason":'
        else:
            piece = b',"choices":[{"index":0,"text":"' + WORD.encode() + b'","finish_reason":'
        self.requests += 1
        if not body.get("stream"):
            self.loop.call_at(
                arrived + ttft_s + (tokens - 1) * settings.itl_s, self._whole, stream, chat, tokens, usage
            )
            return
        options = body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        stream._write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        middle = _chunk(head + piece + b"null}]}\n\n")
        last = head + piece + b'"length"}]}\n\n'
        if include_usage:
            last += head + b',"choices":[],"usage":' + usage + b"}\n\n"
        last = _chunk(last + b"data: [DONE]\n\n") + b"0\r\n\r\n"
        timers = stream.timers
        timers.clear()
        for index in range(tokens):
            data = last if index == tokens - 1 else middle
            timers.append(self.loop.call_at(arrived + ttft_s + index * settings.itl_s, stream._write, data))
        if not stream.keep_alive:
            self.loop.call_at(arrived + ttft_s + tokens * settings.itl_s, stream._close)

    def _whole(self, stream: Stream, chat: bool, tokens: int, usage: bytes) -> None:
        text = (WORD * tokens).encode()
        if chat:
            choice = (
                b'{"index":0,"message":{"role":"assistant","content":"'
                + text
                + b'"},"finish_reason":"length"}'
            )
        else:
            choice = b'{"index":0,"text":"' + text + b'","finish_reason":"length"}'
        body = b'{"id":"x","object":"chat.completion","created":0,"model":' + orjson.dumps(
            self.settings.model
        )
        body += b',"choices":[' + choice + b'],"usage":' + usage + b"}"
        stream.answer(b"200 OK", b"application/json", body)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


async def serve(arguments: argparse.Namespace) -> None:
    settings = Settings(
        model=arguments.model,
        ttft_s=arguments.ttft_ms / 1000,
        itl_s=arguments.itl_ms / 1000,
        default_tokens=arguments.output_tokens,
        prefill_s_per_token=arguments.prefill_ms_per_token / 1000,
        cache_blocks=arguments.cache_blocks,
    )
    server = UpstreamServer(settings)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: Stream(server), arguments.host, arguments.port, backlog=4096)
    port = listener.sockets[0].getsockname()[1]
    if arguments.port_file:
        with open(arguments.port_file, "w") as handle:
            handle.write(str(port))
    print(f"exact upstream on {arguments.host}:{port} (pid {os.getpid()})", file=sys.stderr, flush=True)
    await listener.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", default=None)
    parser.add_argument("--model", "--served-model-name", dest="model", default="ref")
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--prefill-ms-per-token", type=float, default=0.0)
    parser.add_argument("--cache-blocks", type=int, default=4096)
    arguments, _ignored = parser.parse_known_args()
    uvloop.run(serve(arguments))


if __name__ == "__main__":
    main()
