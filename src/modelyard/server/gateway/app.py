"""The gateway's ASGI application: ``/v1`` on a fast path, everything else to a fallback app.

``GatewayApp`` sits in front of everything the server answers. A ``/v1`` request is matched by
one dict lookup and handled here, in a few awaits, without Starlette's request objects or
FastAPI's routers (which walked every REST route before reaching ``/v1``). Any other path goes
to ``fallback``: the REST API's FastAPI app in the main process, or, in a gateway worker, the
relay to the main process (``main_relay.py``).

Every ``/v1`` answer carries ``x-request-id``: the client's (when it is a sane token) or a new
one; it is sent to the engine, and every log line about the request names it.

Usage::

    app = GatewayApp(lambda: runtime, fallback=fastapi_app)   # direct_writing: client_out.py
    uvicorn.Server(uvicorn.Config(app, ...)).run()
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
from collections.abc import Callable
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from modelyard.control.endpoints import Endpoint
from modelyard.errors import ModelyardError
from modelyard.server.door.body_limit import BodyLimitMiddleware
from modelyard.server.door.limits import RequestLimits
from modelyard.server.gateway.access import (
    authenticate,
    check_model_access,
    header,
    model_of,
    parse_json_body,
    read_json_body,
    ready_endpoints,
    visible_deployments,
)
from modelyard.server.gateway.client_out import DirectWriting
from modelyard.server.gateway.errors import MethodNotAllowed, ModelNotFound, UnknownRoute, gateway_error_parts
from modelyard.server.gateway.form_fields import read_form_fields
from modelyard.server.gateway.keys import KeyFacts
from modelyard.server.gateway.limits import Admission, LimitExceeded, reserved_tokens
from modelyard.server.gateway.proxy import ForwardRequest, exchange
from modelyard.server.gateway.responses import ClientTiming, disconnect_callbacks_of, watched
from modelyard.server.gateway.routes import API_ROUTES, ApiRoute
from modelyard.server.gateway.runtime import GatewayRuntime

logger = logging.getLogger(__name__)

_REQUEST_ID = re.compile(rb"^[A-Za-z0-9._:\-]{1,128}$")
_MODELS_PREFIX = "/v1/models/"


# New request ids: a random prefix per process and a counter (unique without a uuid4 per request).
_ID_PREFIX = os.urandom(6).hex()
_id_counter = itertools.count(1)


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's ``x-request-id`` when it is a token of at most 128 characters, else a new one."""
    given = header(headers, b"x-request-id")
    if given is not None and _REQUEST_ID.match(given):
        return given.decode("ascii")
    return f"{_ID_PREFIX}{next(_id_counter):010x}"


def client_host(scope: Scope) -> str | None:
    """The client's address as the server saw it (for throttling wrong keys)."""
    client = scope.get("client")
    return str(client[0]) if client else None


async def read_body(receive: Receive) -> bytes:
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    pieces = [body]
    while message.get("more_body", False):
        message = await receive()
        pieces.append(message.get("body", b""))
    return b"".join(pieces)


def _model_object(name: str, endpoints: tuple[Endpoint, ...]) -> dict[str, object]:
    # "created" is not tracked per deployment by the gateway; 0 keeps OpenAI's integer type.
    model: dict[str, object] = {"id": name, "object": "model", "created": 0, "owned_by": "modelyard"}
    # modelyard's own extension: which engine serves the model and how many replicas are ready
    # (clients that do not know it ignore it; `modelyard bench` records the engine from it).
    extension: dict[str, object] = {"ready_replicas": len(endpoints)}
    if endpoints:
        extension["engine"] = endpoints[0].engine
        extension["engine_version"] = endpoints[0].engine_version
    model["modelyard"] = extension
    return model


class GatewayApp:
    """The ASGI app in front: ``/v1`` here (behind the door's body limit), the rest to ``fallback``."""

    def __init__(
        self,
        runtime: Callable[[], GatewayRuntime | None],
        fallback: ASGIApp,
        limits: RequestLimits | None = None,
        direct_writing: DirectWriting | None = None,
    ) -> None:
        self._runtime = runtime
        self._fallback = fallback
        # Whether answers may be written straight onto uvicorn's connection (checked once).
        self._writing = direct_writing or DirectWriting.for_installed_uvicorn()
        # A body over max_gateway_body_bytes is refused (413) before the key is even looked at.
        self._guarded_v1 = BodyLimitMiddleware(self._serve_v1, limits or RequestLimits())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/") and self._runtime() is not None:
            await self._guarded_v1(scope, receive, send)
            return
        await self._fallback(scope, receive, send)

    async def _serve_v1(self, scope: Scope, receive: Receive, send: Send) -> None:
        runtime = self._runtime()
        assert runtime is not None
        await self._v1(runtime, scope, receive, send, scope["path"])

    async def _v1(
        self, runtime: GatewayRuntime, scope: Scope, receive: Receive, send: Send, path: str
    ) -> None:
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        request_id = request_id_of(headers)
        extra = [(b"x-request-id", request_id.encode())]
        method = scope["method"]
        route = API_ROUTES.get(path)
        if route is not None and method == "POST":
            await self._forward(runtime, route, scope, receive, send, request_id, extra)
            return
        if method in ("GET", "HEAD") and (path == "/v1/models" or path.startswith(_MODELS_PREFIX)):
            await self._models(runtime, scope, send, path, request_id, extra)
            return
        allowed = "POST" if route is not None else "GET" if path.startswith("/v1/models") else None
        error: ModelyardError
        if allowed is not None:
            error = MethodNotAllowed(f"{method} {path} is not allowed", hint=f"use {allowed}")
        else:
            error = UnknownRoute(
                f"no route {path}", hint=f"the gateway serves {', '.join(sorted(API_ROUTES))}"
            )
        await _send_error(send, error, extra, anthropic=False)

    async def _forward(
        self,
        runtime: GatewayRuntime,
        route: ApiRoute,
        scope: Scope,
        receive: Receive,
        send: Send,
        request_id: str,
        extra: list[tuple[bytes, bytes]],
    ) -> None:
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        loop = runtime.engine_client.loop
        arrived_s = loop.time()
        counts = runtime.counts
        key_name = ""
        deployment = ""
        try:
            facts = await authenticate(runtime, headers, client_host(scope), request_id)
            key_name = facts.name
            content_type = header(headers, b"content-type") or b"application/json"
            if route.body == "json":
                body = await read_json_body(receive, runtime.limits.max_json_depth)
                payload = parse_json_body(body)
                form = None
                model = model_of(payload.get("model"))
            else:
                body = await read_body(receive)
                payload = None
                form = read_form_fields(body, content_type)
                model = model_of(form.values.get("model"))
            check_model_access(runtime, facts, model)
            deployment = model
            endpoints = await ready_endpoints(runtime, model, route.path, request_id, receive)
            # A form's file is not a prompt: only a JSON body counts towards the reservation.
            admission = await admit(
                runtime, facts, model, payload or {}, len(body) if payload is not None else 0
            )
        except LimitExceeded as error:
            counts.request_finished(
                deployment, key_name, route.path, 429, error.code, 0.0, None, started=False
            )
            await _send_limit_exceeded(send, error, extra)
            return
        except ModelyardError as error:
            counts.request_finished(
                deployment, key_name, route.path, error.http_status, error.code, 0.0, None, started=False
            )
            await _send_error(send, error, extra, anthropic=route.anthropic_errors)
            return
        timing = ClientTiming(
            arrived_s=arrived_s,
            clock=loop.time,
            on_first_byte=lambda seconds: counts.first_byte(model, facts.name, seconds),
            on_gap=counts.itl_observer(model),
        )
        request = ForwardRequest(
            route=route,
            facts=facts,
            model=model,
            endpoints=endpoints,
            body=body,
            payload=payload,
            form=form,
            content_type=content_type,
            request_id=request_id,
            timing=timing,
            admission=admission,
        )
        await watched(
            receive,
            lambda watch: exchange(runtime, request, send, watch, extra, self._writing),
            loop,
            disconnect_callbacks_of(scope),
        )

    async def _models(
        self,
        runtime: GatewayRuntime,
        scope: Scope,
        send: Send,
        path: str,
        request_id: str,
        extra: list[tuple[bytes, bytes]],
    ) -> None:
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        counts = runtime.counts
        label = "/v1/models" if path == "/v1/models" else "/v1/models/{model}"
        key_name = ""
        try:
            facts: KeyFacts = await authenticate(runtime, headers, client_host(scope), request_id)
            key_name = facts.name
            names = visible_deployments(runtime, facts)
            registry = runtime.registry
            if path == "/v1/models":
                data = [_model_object(name, registry.endpoints_for(name)) for name in names]
                body = orjson.dumps({"object": "list", "data": data})
            else:
                model = path[len(_MODELS_PREFIX) :]
                if model not in names:
                    hint = (
                        f"known models: {', '.join(names)}"
                        if names
                        else "no model is available to this key yet"
                    )
                    raise ModelNotFound(f"model {model!r} does not exist", hint=hint)
                body = orjson.dumps(_model_object(model, registry.endpoints_for(model)))
        except ModelyardError as error:
            counts.request_finished(
                "", key_name, label, error.http_status, error.code, 0.0, None, started=False
            )
            await _send_error(send, error, extra, anthropic=False)
            return
        counts.request_finished("", key_name, label, 200, None, 0.0, None, started=False)
        response_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": response_headers + extra})
        await send({"type": "http.response.body", "body": body, "more_body": False})


async def admit(
    runtime: GatewayRuntime, facts: KeyFacts, model: str, payload: dict[str, Any], body_bytes: int
) -> Admission:
    """The key's project's quotas (``project_limits.py``), then the key's and the deployment's
    limits (``limits.py``): admitted, or ``LimitExceeded``; a quota's usage is read from the
    database in a worker thread (a key's the first time it is seen in a period, a project's again
    every few seconds)."""
    limiter = runtime.limiter
    start = limiter.quota_to_load(facts.id, facts.limits)
    if start is not None:
        await asyncio.to_thread(limiter.load_quota, facts.id, start)
    project = facts.project
    projects = runtime.project_limiter
    project_admission = None
    if project is not None:
        for period, period_begins in projects.to_read(project):
            await asyncio.to_thread(projects.read, project.project_id, period, period_begins)
        project_admission = projects.admit(project, reserved_tokens(payload, body_bytes))
    try:
        admission = limiter.admit(
            facts.id,
            facts.limits,
            payload,
            body_bytes=body_bytes,
            deployment=runtime.registry.limits_for(model),
            deployment_name=model,
        )
    except LimitExceeded:
        if project_admission is not None:
            projects.finish(project_admission, 0)
        raise
    admission.project = project_admission
    return admission


async def _send_limit_exceeded(send: Send, error: LimitExceeded, extra: list[tuple[bytes, bytes]]) -> None:
    """OpenAI's 429: ``{"error": {"message", "type": "requests"|"tokens", "param", "code"}}``."""
    message = f"{error.message} ({error.hint})" if error.hint else error.message
    body = orjson.dumps(
        {"error": {"message": message, "type": error.limit_type, "param": None, "code": error.code}}
    )
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if not error.never:  # a request larger than the limit is told so, not when to retry
        headers.append((b"retry-after", str(error.retry_after_seconds).encode()))
    await send({"type": "http.response.start", "status": 429, "headers": headers + extra})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _send_error(
    send: Send, error: ModelyardError, extra: list[tuple[bytes, bytes]], *, anthropic: bool
) -> None:
    status, headers, body = gateway_error_parts(error, anthropic=anthropic)
    await send({"type": "http.response.start", "status": status, "headers": headers + extra})
    await send({"type": "http.response.body", "body": body, "more_body": False})
