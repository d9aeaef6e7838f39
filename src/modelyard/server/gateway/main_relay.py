"""In a gateway worker: every path but ``/v1`` relayed to the main process, streamed both ways.

The gateway workers own the public port, so the REST API, the console and ``/metrics`` reach
the main process through here, over its private Unix socket (only this user can connect to it).
The main process sees the client's address in ``X-Forwarded-For``, set here to the address this
worker's uvicorn found (the TCP peer, or what a proxy on this host said, as uvicorn trusts by
default; any other value the client sent is replaced), and the scheme in ``X-Forwarded-Proto``.
Answers are streamed as they come (``modelyard logs --follow`` holds one open); a client that
leaves closes the relayed request too. While the main process is starting (its socket is not
there yet), a request waits for it up to ``MAIN_WAIT_S``, then gets a 503.

Not on the hot path: aiohttp does the HTTP work here.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from starlette.types import Receive, Scope, Send

from modelyard.server.gateway.app import read_body
from modelyard.server.gateway.responses import ClientWatch, disconnect_callbacks_of, watched

logger = logging.getLogger(__name__)

MAIN_WAIT_S = 30.0
_RETRY_S = 0.05
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"content-length",
    }
)


class MainRelay:
    """An ASGI app that forwards each HTTP request to the main process's Unix socket."""

    def __init__(self, api_socket_path: str) -> None:
        self._socket_path = api_socket_path
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=self._socket_path, limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
                auto_decompress=False,
                trust_env=False,
                # Never a shared cookie jar: one client's session cookie must not ride on another's request.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan and websockets are not relayed
        body = await read_body(receive)
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope["headers"]
            if name not in _HOP_BY_HOP
        ]
        client = scope.get("client")
        if client:
            headers.append(("X-Forwarded-For", str(client[0])))
        headers.append(("X-Forwarded-Proto", str(scope.get("scheme", "http"))))
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target = target + b"?" + scope["query_string"]
        url = "http://main" + target.decode("latin-1")

        async def relay(watch: ClientWatch) -> None:
            response = await self._send(scope["method"], url, headers, body)
            if response is None:
                watch.finishing()
                await _send_unavailable(send)
                return
            try:
                out_headers = [
                    (name.lower().encode("latin-1"), value.encode("latin-1"))
                    for name, value in response.headers.items()
                    if name.lower().encode("latin-1") not in _HOP_BY_HOP
                ]
                await send({"type": "http.response.start", "status": response.status, "headers": out_headers})
                async for piece in response.content.iter_any():
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
                watch.finishing()
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                response.close()

        await watched(receive, relay, asyncio.get_running_loop(), disconnect_callbacks_of(scope))

    async def _send(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes
    ) -> aiohttp.ClientResponse | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MAIN_WAIT_S
        while True:
            try:
                return await self._client().request(
                    method, url, headers=headers, data=body, allow_redirects=False
                )
            except (aiohttp.ClientConnectorError, FileNotFoundError):
                if loop.time() >= deadline:
                    logger.warning(
                        "the main process did not answer on %s within %g s", self._socket_path, MAIN_WAIT_S
                    )
                    return None
                await asyncio.sleep(_RETRY_S)


async def _send_unavailable(send: Send) -> None:
    body = (
        b'{"error": {"message": "the server is starting or stopping; try again", '
        b'"code": "server_unavailable"}}'
    )
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
