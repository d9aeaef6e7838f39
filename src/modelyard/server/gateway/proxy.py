"""Forwarding one ``POST /v1/...`` request to a replica and its answer back to the client.

The body is parsed once (to find ``model``, ``stream`` and, for prefix-aware routing, the start
of the prompt). It is forwarded as the client wrote it unless the engine needs another model
name, or a stream needs ``stream_options.include_usage`` (added in front of the other fields,
without re-encoding the rest, when the client sent no ``stream_options``). The replica is the
least busy one, or the prompt prefix's one (``routing.py``). A replica that cannot be reached
(refused, dropped before answering) is skipped for another one: nothing has been sent to the
client yet. Once the engine answers, its answer is relayed (``responses.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from starlette.types import Send

from modelyard.control.endpoints import Endpoint
from modelyard.http_client import ClosedBeforeAnswer, Http1Response, ServerUnreachable
from modelyard.server.gateway.client_out import DirectWriting
from modelyard.server.gateway.errors import EngineUnreachable as EngineUnreachableError
from modelyard.server.gateway.errors import error_json_bytes
from modelyard.server.gateway.form_fields import FormFields
from modelyard.server.gateway.json_bytes import compact_json
from modelyard.server.gateway.keys import KeyFacts
from modelyard.server.gateway.limits import Admission
from modelyard.server.gateway.model_names import ModelNameRewrite
from modelyard.server.gateway.prefix_routing import prefix_hash
from modelyard.server.gateway.responses import (
    CLIENT_CLOSED_REQUEST,
    ClientTiming,
    ClientWatch,
    RelayOutcome,
    relay_body,
    relay_openai_stream,
    relay_passthrough_stream,
    send_whole,
)
from modelyard.server.gateway.routes import OPENAI_STREAMING_PATHS, ApiRoute
from modelyard.server.gateway.runtime import GatewayRuntime
from modelyard.server.gateway.streaming import SseRelay
from modelyard.server.gateway.usage import TokenUsage, UsageRow

logger = logging.getLogger(__name__)

_USAGE_OPTION = b'{"stream_options":{"include_usage":true},'


@dataclass
class ForwardRequest:
    """One request on its way, as the gateway understood it."""

    route: ApiRoute
    facts: KeyFacts
    model: str
    endpoints: tuple[Endpoint, ...]
    body: bytes
    # The JSON body (None for a form), and the form's fields (None for JSON).
    payload: dict[str, Any] | None
    form: FormFields | None
    content_type: bytes
    request_id: str
    timing: ClientTiming
    # What the key's limits admitted (limits.py), settled when the request ends.
    admission: Admission | None = None

    @property
    def streaming(self) -> bool:
        if self.payload is not None:
            return self.payload.get("stream") is True
        return self.form is not None and self.form.values.get("stream", "").lower() == "true"

    @property
    def openai_stream(self) -> bool:
        return self.streaming and self.route.path in OPENAI_STREAMING_PATHS

    def client_wants_usage(self) -> bool:
        options = self.payload.get("stream_options") if self.payload is not None else None
        return isinstance(options, dict) and options.get("include_usage") is True

    def body_for(self, endpoint: Endpoint) -> bytes:
        """The bytes to send to ``endpoint``: the client's, changed only where they must be."""
        rename = endpoint.served_model_name != self.model
        if self.form is not None:
            if rename and "model" in self.form.spans:
                return self.form.with_value(self.body, "model", endpoint.served_model_name)
            return self.body
        assert self.payload is not None
        add_usage = self.openai_stream and not self.client_wants_usage()
        if not rename and not add_usage:
            return self.body
        if not rename and "stream_options" not in self.payload:
            start = self.body.find(b"{")
            return _USAGE_OPTION + self.body[start + 1 :]
        payload = dict(self.payload)
        payload["model"] = endpoint.served_model_name
        if add_usage:
            options = payload.get("stream_options")
            payload["stream_options"] = {
                **(options if isinstance(options, dict) else {}),
                "include_usage": True,
            }
        return compact_json(payload)


def _engine_headers(request: ForwardRequest) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", request.content_type),
        (b"accept-encoding", b"identity"),
        (b"x-request-id", request.request_id.encode()),
    ]


def choose_endpoint(runtime: GatewayRuntime, request: ForwardRequest, excluded: list[str]) -> Endpoint | None:
    balancer = runtime.balancer
    if request.payload is not None and runtime.registry.routing_for(request.model) == "prefix":
        settings = runtime.settings
        key = prefix_hash(request.payload, settings.prefix_characters)
        if key is not None:
            return balancer.choose_by_prefix(request.endpoints, key, settings.prefix_load_factor, excluded)
    return balancer.choose(request.endpoints, excluded)


async def send_to_replica(runtime: GatewayRuntime, request: ForwardRequest) -> tuple[Http1Response, Endpoint]:
    """Send to the chosen replica, moving on while replicas cannot be reached.

    A refused or timed-out connection rules a replica out for this request. A connection dropped
    before any answer (the engine closed an idle connection just then, or is going down) gets one
    more try on a fresh connection before the replica is ruled out. On return the endpoint is
    acquired in the balancer; the caller releases it.
    """
    balancer = runtime.balancer
    excluded: list[str] = []
    dropped_once: set[str] = set()
    failures: list[str] = []
    plain_headers = _engine_headers(request)
    encoded: dict[str, bytes] = {}
    while True:
        endpoint = choose_endpoint(runtime, request, excluded)
        if endpoint is None:
            raise EngineUnreachableError(
                f"no replica of {request.model!r} could be reached: {'; '.join(failures)}",
                hint=f"the engines may have just stopped; see `modelyard logs {request.model}`",
            )
        content = encoded.get(endpoint.served_model_name)
        if content is None:
            content = encoded[endpoint.served_model_name] = request.body_for(endpoint)
        headers = plain_headers
        if endpoint.engine_api_key:
            # The engine asks for its own key: it gets that one, never the client's.
            headers = [*plain_headers, (b"authorization", f"Bearer {endpoint.engine_api_key}".encode())]
        balancer.acquire(endpoint)
        fresh = endpoint.base_url in dropped_once
        try:
            response = await runtime.engine_client.post(
                endpoint.base_url, request.route.path, headers, content, fresh=fresh
            )
            return response, endpoint
        except ServerUnreachable as error:
            balancer.release(endpoint)
            balancer.refused(endpoint)
            # The engine may have died: the controller looks now, not at its next tick.
            runtime.on_refused(endpoint)
            excluded.append(endpoint.base_url)
            failure = f"{endpoint.base_url}: {error}"
        except ClosedBeforeAnswer as error:
            balancer.release(endpoint)
            if endpoint.base_url in dropped_once:
                excluded.append(endpoint.base_url)
            dropped_once.add(endpoint.base_url)
            failure = f"{endpoint.base_url}: {error}"
        except BaseException:
            balancer.release(endpoint)
            raise
        failures.append(failure)
        logger.warning(
            "request %s: replica %s of %r (instance %d) could not take a request (%s); trying again",
            request.request_id,
            endpoint.base_url,
            request.model,
            endpoint.instance_id,
            failure,
        )


def ttft_ms_of(timing: ClientTiming, status: int) -> float | None:
    """The request's time to first token in milliseconds, as the gateway saw it, when its row is
    made (just before the answer's last bytes): from its arrival to the first byte of a streamed
    answer sent to the client; for a whole answer (not streamed), to its body about to be sent,
    which is when the client gets its first token. None for an answer that is not a success
    (a refusal, an engine error, a client that left before any byte)."""
    first_byte_s = timing.first_byte_s
    if first_byte_s is None:
        if status != 200:
            return None
        first_byte_s = timing.clock()
    return (first_byte_s - timing.arrived_s) * 1000.0


async def exchange(
    runtime: GatewayRuntime,
    request: ForwardRequest,
    send: Send,
    watch: ClientWatch,
    extra_headers: list[tuple[bytes, bytes]],
    writing: DirectWriting,
) -> None:
    """Send the request to a replica and relay its answer; record it whatever happens
    (``writing``: whether answers may go straight onto the connection, ``client_out.py``)."""
    counts = runtime.counts
    model = request.model
    counts.request_started(model)
    outcome = RelayOutcome(status=CLIENT_CLOSED_REQUEST, usage=None, engine_done=False, code="client_closed")
    sent: tuple[Http1Response, Endpoint] | None = None

    def record(status: int, usage: TokenUsage | None) -> None:
        used = usage.prompt_tokens + usage.completion_tokens if usage is not None else 0
        runtime.usage.record(
            UsageRow(
                api_key_id=request.facts.id,
                deployment_name=model,
                endpoint=request.route.path,
                usage=usage,
                status_code=status,
                ttft_ms=ttft_ms_of(request.timing, status),
            )
        )
        if request.admission is not None:  # after the row: the limiter notes its journal sequence
            runtime.limiter.finish(request.admission, used)
            if request.admission.project is not None:
                runtime.project_limiter.finish(request.admission.project, used)

    # Recorded (journaled) just before the answer's last bytes; in ``finally`` if it never got there.
    watch.on_finishing = record
    try:
        try:
            sent = await send_to_replica(runtime, request)
        except EngineUnreachableError as error:
            logger.warning("request %s: %s", request.request_id, error)
            outcome = RelayOutcome(error.http_status, None, engine_done=False, code=error.code)
            body = error_json_bytes(str(error), status=error.http_status, code=error.code)
            await send_whole(
                send, watch, error.http_status, body, b"application/json", extra_headers, writing
            )
            return
        upstream, endpoint = sent
        model_rewrite = ModelNameRewrite.between(endpoint.served_model_name, model)
        description = (
            f"request {request.request_id} to deployment {model!r} (instance {endpoint.instance_id})"
        )
        event_stream = (upstream.header(b"content-type") or b"").startswith(b"text/event-stream")
        if request.openai_stream and upstream.status == 200 and event_stream:
            relay = SseRelay(model_rewrite=model_rewrite, client_wants_usage=request.client_wants_usage())
            outcome = await relay_openai_stream(
                upstream, relay, send, watch, description, request.timing, extra_headers, writing
            )
        elif (
            request.route.answer == "passthrough"
            and upstream.status == 200
            and (event_stream or request.streaming)
        ):
            outcome = await relay_passthrough_stream(
                upstream, send, watch, description, request.timing, extra_headers
            )
        else:
            normalise = request.route.answer == "openai"
            outcome = await relay_body(
                upstream,
                model_rewrite,
                send,
                watch,
                description,
                normalise=normalise,
                extra_headers=extra_headers,
                writing=writing,
            )
    finally:
        if sent is not None:
            upstream, endpoint = sent
            if outcome.engine_done:
                upstream.release()  # the connection goes back to the pool
            else:
                upstream.close()  # the engine sees the disconnect and stops generating
            runtime.balancer.release(endpoint)
        usage = outcome.usage
        if not watch.recorded:
            watch.recorded = True
            record(outcome.status, usage)
        timing = request.timing
        tokens = (usage.prompt_tokens, usage.completion_tokens) if usage is not None else None
        code = outcome.code if outcome.status >= 400 else None
        counts.request_finished(
            model,
            request.facts.name,
            request.route.path,
            outcome.status,
            code,
            timing.clock() - timing.arrived_s,
            tokens,
        )
