"""The body limit per route, as the outermost ASGI layer of the app.

- A ``Content-Length`` over the route's limit is answered ``413`` at once: not a byte of the
  body is read, the route (and its authentication) never runs. uvicorn then reads and drops the
  rest of the body, so the client that sent it reads the 413 instead of a broken connection;
  past ``DRAIN_LIMIT_BYTES`` the connection is closed instead.
- A body without a length (chunked) is counted as the route reads it; past the limit the route
  is told the client left and the client gets the 413 (uvicorn drops the rest of the body).
- On REST routes (JSON, at most ``max_api_body_bytes``) the body is read here and its nesting
  checked as it arrives (``json_depth.py``), before the route parses it: a body that nests too
  deep is answered ``400`` as soon as it does (uvicorn drops the rest of it, unexamined).

Usage::

    app.add_middleware(BodyLimitMiddleware, limits=RequestLimits())
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from modelyard.server.door.json_depth import JsonDepthScanner, feed_sliced
from modelyard.server.door.limits import BodyRule, RequestLimits, describe_bytes
from modelyard.server.door.refusal import refusal_body

logger = logging.getLogger(__name__)

PAYLOAD_TOO_LARGE = 413
# A refused body up to this size is read and dropped so that the client sees the 413.
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024
_METHODS_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _send_error(send: Send, status: int, body: bytes, *, close: bool) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def too_deep_body(limit: int) -> bytes:
    """The REST API's refusal of a JSON body that nests deeper than ``limit``."""
    return refusal_body(
        400,
        f"the JSON body nests deeper than {limit} levels",
        "json_too_deep",
        hint="flatten the request; the limit is set by "
        + RequestLimits.environment_variable("max_json_depth"),
    )


def _too_large_body(rule: BodyRule, size: str) -> bytes:
    return refusal_body(
        PAYLOAD_TOO_LARGE,
        f"the request body is {size}; this route accepts at most {describe_bytes(rule.limit_bytes)}",
        "body_too_large",
        hint=f"send a smaller body; the server's limit is set by {rule.environment_variable}",
    )


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, limits: RequestLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rule = self.limits.body_rule(scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > rule.limit_bytes:
            logger.info("refused a %s byte body for %s (limit %d)", declared, scope["path"], rule.limit_bytes)
            body = _too_large_body(rule, f"{declared} bytes")
            await _send_error(send, PAYLOAD_TOO_LARGE, body, close=declared > DRAIN_LIMIT_BYTES)
            return
        if rule.check_json and scope["method"] in _METHODS_WITH_BODY:
            await self._checked_json(scope, receive, send, rule)
        elif declared is None and scope["method"] in _METHODS_WITH_BODY:
            await self._counted(scope, receive, send, rule)
        else:
            # The HTTP parser stops at Content-Length: the body cannot outgrow what was declared.
            await self.app(scope, receive, send)

    async def _checked_json(self, scope: Scope, receive: Receive, send: Send, rule: BodyRule) -> None:
        """Read the (small) body here, checking its size and nesting as it arrives, then hand it
        to the route. A body too deep is refused as soon as it is (the rest is not read)."""
        chunks: list[bytes] = []
        size = 0
        depth = JsonDepthScanner(self.limits.max_json_depth)
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending its body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > rule.limit_bytes:
                await _send_error(send, PAYLOAD_TOO_LARGE, _too_large_body(rule, "larger"), close=False)
                return
            if await feed_sliced(depth, chunk):
                # Refused before the end of the body: uvicorn drops the rest of it unexamined.
                await _send_error(send, 400, too_deep_body(depth.limit), close=False)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()  # a disconnect, once the client goes
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _counted(self, scope: Scope, receive: Receive, send: Send, rule: BodyRule) -> None:
        """A body of unknown length: refused as soon as it passes the limit."""
        received = 0
        refused = False

        async def counted_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > rule.limit_bytes:
                    refused = True
                    if not response_started:
                        await _send_error(
                            send, PAYLOAD_TOO_LARGE, _too_large_body(rule, "larger"), close=False
                        )
                    return {"type": "http.disconnect"}
            return message

        response_started = False

        async def guarded_send(message: Message) -> None:
            nonlocal response_started
            if refused:
                return  # the door answered already; what the route says after that is dropped
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:
            if not refused:
                raise
