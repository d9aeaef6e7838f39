"""Forwarding one OpenAI request to a replica and its answer back to the client.

The body is parsed once (to find ``model``), gets the engine's served model name and, when
streaming, ``stream_options.include_usage = true`` (other stream options are kept), and is sent to
the replica with the fewest outstanding requests. A replica that cannot be reached (refused,
reset before answering) is skipped for another one: nothing has been sent to the client yet.
Once the engine answers, its answer is relayed: streams event by event (``stream_response.py``),
whole bodies as they are (``bodies.py``), errors in OpenAI's shape.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
from starlette.requests import Request
from starlette.responses import Response

from modelyard.control.endpoints import Endpoint
from modelyard.errors import ModelyardError
from modelyard.server.gateway.access import authenticate, parse_request_body, ready_endpoints
from modelyard.server.gateway.bodies import normalise_error_body, normalise_success_body
from modelyard.server.gateway.errors import EngineUnreachable, gateway_error_response
from modelyard.server.gateway.keys import KeyFacts
from modelyard.server.gateway.model_names import ModelNameRewrite
from modelyard.server.gateway.runtime import ENGINE_CONNECTION_ERRORS, GatewayRuntime, gateway_runtime
from modelyard.server.gateway.stream_response import CLIENT_CLOSED_REQUEST, EngineStreamResponse
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
        payload, model = parse_request_body(await request.body())
        endpoints = await ready_endpoints(runtime, facts, model)
        return await _forward(runtime, facts, path, payload, model, endpoints)
    except ModelyardError as error:
        return gateway_error_response(error)


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
            content = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
            encoded_for = endpoint.served_model_name
        url = endpoint.base_url + path
        balancer.acquire(endpoint)
        try:
            response = await runtime.engine_client.request("POST", url, data=content, headers=_ENGINE_HEADERS)
            return response, endpoint
        except _UNREACHABLE as error:
            balancer.release(endpoint)
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


async def _forward(
    runtime: GatewayRuntime,
    facts: KeyFacts,
    path: str,
    payload: dict[str, Any],
    model: str,
    endpoints: tuple[Endpoint, ...],
) -> Response:
    streaming = path in STREAMING_PATHS and bool(payload.get("stream"))
    client_wants_usage = _ask_for_usage(payload) if streaming else False
    upstream, endpoint = await _send(runtime, path, payload, model, endpoints)
    model_rewrite = ModelNameRewrite.between(endpoint.served_model_name, model)

    def finish(status: int, usage: TokenUsage | None) -> None:
        runtime.balancer.release(endpoint)
        runtime.usage.record(
            UsageRow(
                api_key_id=facts.id, deployment_name=model, endpoint=path, usage=usage, status_code=status
            )
        )

    content_type = upstream.headers.get("Content-Type", "application/json")
    if streaming and upstream.status == 200 and content_type.startswith("text/event-stream"):
        relay = SseRelay(model_rewrite=model_rewrite, client_wants_usage=client_wants_usage)
        return EngineStreamResponse(
            upstream,
            relay,
            on_finish=lambda status: finish(status, relay.usage),
            description=f"deployment {model!r} (instance {endpoint.instance_id})",
        )
    try:
        body = await upstream.read()
    except ENGINE_CONNECTION_ERRORS as error:
        upstream.close()
        finish(502, None)
        return gateway_error_response(
            EngineUnreachable(
                f"the engine serving {model!r} (instance {endpoint.instance_id}) closed the connection "
                f"before its answer was complete ({type(error).__name__})",
                hint=f"see `modelyard logs {model}`",
            )
        )
    except BaseException:
        upstream.close()
        finish(CLIENT_CLOSED_REQUEST, None)
        raise
    upstream.release()
    if upstream.status != 200:
        finish(upstream.status, None)
        return Response(
            normalise_error_body(body, upstream.status),
            status_code=upstream.status,
            media_type="application/json",
        )
    body, usage = normalise_success_body(body, model_rewrite)
    finish(200, usage)
    return Response(body, status_code=200, media_type=content_type)
