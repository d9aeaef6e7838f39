"""Forwarding one OpenAI request to a replica and its answer back to the client.

The body is parsed once (to find ``model``), gets the engine's served model name and, when
streaming, ``stream_options.include_usage = true`` (other stream options are kept), and is sent to
the replica with the fewest outstanding requests. A replica that cannot be reached (refused,
reset before answering) is skipped for another one: nothing has been sent to the client yet.
Once the engine answers, its answer is relayed (``responses.py``): streams event by event, whole
bodies once complete, errors in OpenAI's shape.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

import aiohttp
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Send

from modelyard.control.endpoints import Endpoint
from modelyard.errors import ModelyardError
from modelyard.server.gateway.access import authenticate, parse_request_body, ready_endpoints
from modelyard.server.gateway.errors import EngineUnreachable, error_json_bytes, gateway_error_response
from modelyard.server.gateway.json_bytes import compact_json
from modelyard.server.gateway.keys import KeyFacts
from modelyard.server.gateway.limits import Admission, LimitExceeded, limit_exceeded_response
from modelyard.server.gateway.model_names import ModelNameRewrite
from modelyard.server.gateway.responses import (
    CLIENT_CLOSED_REQUEST,
    ClientWatch,
    ClientWatchedResponse,
    RelayOutcome,
    relay_body,
    relay_stream,
    send_whole,
)
from modelyard.server.gateway.runtime import ENGINE_CONNECTION_ERRORS, GatewayRuntime, gateway_runtime
from modelyard.server.gateway.streaming import SseRelay
from modelyard.server.gateway.usage import TokenUsage, UsageRow

logger = logging.getLogger(__name__)

_ENGINE_HEADERS = {"content-type": "application/json", "accept-encoding": "identity"}
# Failures before the engine answered, so nothing has reached the client: safe to try again.
_UNREACHABLE = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
_DROPPED = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
STREAMING_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


async def forward(request: Request, path: str) -> Response:
    """Handle one ``POST /v1/...`` request; every failure becomes an OpenAI-shaped error."""
    runtime = gateway_runtime(request)
    try:
        facts = await authenticate(runtime, request)
        body = await request.body()
        payload, model = parse_request_body(body, runtime.context.limits.max_json_depth)
        endpoints = await ready_endpoints(runtime, facts, model)
        admission = await _admit(runtime, facts, payload, len(body))
    except LimitExceeded as error:
        return limit_exceeded_response(error)
    except ModelyardError as error:
        return gateway_error_response(error)
    return ClientWatchedResponse(
        partial(_exchange, runtime, facts, path, payload, model, endpoints, admission)
    )


async def _admit(
    runtime: GatewayRuntime, facts: KeyFacts, payload: dict[str, Any], body_bytes: int
) -> Admission:
    """The key's limits (``limits.py``): admitted, or ``LimitExceeded``; a quota's usage is read
    from the database (in a worker thread) the first time the key is seen in a period."""
    limiter = runtime.limiter
    start = limiter.quota_to_load(facts.id, facts.limits)
    if start is not None:
        await asyncio.to_thread(limiter.load_quota, facts.id, start)
    return limiter.admit(facts.id, facts.limits, payload, body_bytes=body_bytes)


def _ask_for_usage(payload: dict[str, Any]) -> bool:
    """Set ``stream_options.include_usage``; return whether the client had asked for it itself."""
    options = payload.get("stream_options")
    if not isinstance(options, dict):
        options = {}
        payload["stream_options"] = options
    client_wants_usage = options.get("include_usage") is True
    options["include_usage"] = True
    return client_wants_usage


async def _send(
    runtime: GatewayRuntime, path: str, payload: dict[str, Any], model: str, endpoints: tuple[Endpoint, ...]
) -> tuple[aiohttp.ClientResponse, Endpoint]:
    """Send to the least busy replica, moving on while replicas cannot be reached.

    A refused or timed-out connection rules a replica out for this request. A connection dropped
    before any answer (the engine closed an idle connection just then, or is going down) gets one
    more try on a fresh connection before the replica is ruled out. On return the endpoint is
    acquired in the balancer; the caller releases it.
    """
    balancer = runtime.balancer
    excluded: list[str] = []
    dropped_once: set[str] = set()
    failures: list[str] = []
    encoded_for: str | None = None
    content = b""
    while True:
        endpoint = balancer.choose(endpoints, exclude=excluded)
        if endpoint is None:
            raise EngineUnreachable(
                f"no replica of {model!r} could be reached: {'; '.join(failures)}",
                hint=f"the engines may have just stopped; see `modelyard logs {model}`",
            )
        if encoded_for != endpoint.served_model_name:
            payload["model"] = endpoint.served_model_name
            content = compact_json(payload)
            encoded_for = endpoint.served_model_name
        url = endpoint.base_url + path
        balancer.acquire(endpoint)
        try:
            headers = _ENGINE_HEADERS
            if endpoint.engine_api_key:
                headers = {**_ENGINE_HEADERS, "authorization": f"Bearer {endpoint.engine_api_key}"}
            response = await runtime.engine_client.request("POST", url, data=content, headers=headers)
            return response, endpoint
        except _UNREACHABLE as error:
            balancer.release(endpoint)
            balancer.refused(endpoint)
            # The engine may have died: the controller looks now, not at its next tick.
            runtime.context.controller.poke()
            excluded.append(endpoint.base_url)
            failure = f"{endpoint.base_url}: {type(error).__name__}"
        except _DROPPED as error:
            balancer.release(endpoint)
            if endpoint.base_url in dropped_once:
                excluded.append(endpoint.base_url)
            dropped_once.add(endpoint.base_url)
            failure = f"{endpoint.base_url}: {type(error).__name__}"
        except ENGINE_CONNECTION_ERRORS as error:
            balancer.release(endpoint)
            raise EngineUnreachable(
                f"replica {endpoint.base_url} of {model!r} failed before answering: {type(error).__name__}",
                hint=f"see `modelyard logs {model}`",
            ) from error
        except BaseException:
            balancer.release(endpoint)
            raise
        failures.append(failure)
        logger.warning(
            "replica %s of %r (instance %d) could not take a request (%s); trying again",
            endpoint.base_url,
            model,
            endpoint.instance_id,
            failure,
        )


async def _exchange(
    runtime: GatewayRuntime,
    facts: KeyFacts,
    path: str,
    payload: dict[str, Any],
    model: str,
    endpoints: tuple[Endpoint, ...],
    admission: Admission,
    send: Send,
    watch: ClientWatch,
) -> None:
    """Send the request to a replica and relay its answer; record it whatever happens."""
    streaming = path in STREAMING_PATHS and bool(payload.get("stream"))

    def record(status: int, usage: TokenUsage | None) -> None:
        used = usage.prompt_tokens + usage.completion_tokens if usage is not None else 0
        runtime.limiter.finish(admission, used)
        runtime.usage.record(
            UsageRow(
                api_key_id=facts.id, deployment_name=model, endpoint=path, usage=usage, status_code=status
            )
        )

    # Recorded (journaled) just before the answer's last bytes; below, if it never got that far.
    watch.on_finishing = record
    client_wants_usage = _ask_for_usage(payload) if streaming else False
    outcome = RelayOutcome(status=CLIENT_CLOSED_REQUEST, usage=None, engine_done=False)
    sent: tuple[aiohttp.ClientResponse, Endpoint] | None = None
    try:
        try:
            sent = await _send(runtime, path, payload, model, endpoints)
        except EngineUnreachable as error:
            logger.warning("%s", error)
            outcome.status = error.http_status
            body = error_json_bytes(str(error), status=error.http_status, code=error.code)
            await send_whole(send, watch, error.http_status, body, "application/json")
            return
        upstream, endpoint = sent
        model_rewrite = ModelNameRewrite.between(endpoint.served_model_name, model)
        description = f"deployment {model!r} (instance {endpoint.instance_id})"
        content_type = upstream.headers.get("Content-Type", "")
        if streaming and upstream.status == 200 and content_type.startswith("text/event-stream"):
            relay = SseRelay(model_rewrite=model_rewrite, client_wants_usage=client_wants_usage)
            outcome = await relay_stream(upstream, relay, send, watch, description)
        else:
            outcome = await relay_body(upstream, model_rewrite, send, watch, description)
    finally:
        if sent is not None:
            upstream, endpoint = sent
            if outcome.engine_done:
                upstream.release()  # the connection goes back to the pool
            else:
                upstream.close()  # the engine sees the disconnect and stops generating
            runtime.balancer.release(endpoint)
        if not watch.recorded:
            watch.recorded = True
            record(outcome.status, outcome.usage)
