"""Who may call what: the bearer key, the request body's ``model``, and the replicas to try.

Raises the gateway errors of ``errors.py``; the routes turn them into OpenAI-shaped responses.
Nothing here touches the database on the way to a ready replica: keys come from ``KeyCache``,
deployments from the controller's ``EndpointRegistry``. Only the 503 path reads instance states.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request

from modelyard.control.endpoints import Endpoint
from modelyard.server.door.json_depth import json_nesting_exceeds
from modelyard.server.door.limits import RequestLimits
from modelyard.server.gateway.errors import (
    InvalidApiKey,
    InvalidJsonBody,
    KeyCheckUnavailable,
    MissingModel,
    ModelNotAllowed,
    ModelNotFound,
    NoReadyReplica,
)
from modelyard.server.gateway.keys import KeyFacts
from modelyard.server.gateway.routing import describe_unready
from modelyard.server.gateway.runtime import GatewayRuntime
from modelyard.services.key_hashing import display_prefix

logger = logging.getLogger(__name__)

# What a 503 tells clients to wait while a replica starts or restarts (vLLM took 95 s on an H200
# after a SIGKILL; clients retrying at once only add load).
RETRY_AFTER_WHILE_STARTING_SECONDS = 5

_KEY_HINT = "an admin creates keys with `modelyard keys create NAME`"


async def authenticate(runtime: GatewayRuntime, request: Request) -> KeyFacts:
    """The facts of the request's ``Authorization: Bearer`` key; ``InvalidApiKey`` otherwise."""
    header = request.headers.get("authorization")
    if not header:
        raise InvalidApiKey("no API key: send the header 'Authorization: Bearer <key>'", hint=_KEY_HINT)
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise InvalidApiKey("the Authorization header must be 'Bearer <key>'", hint=_KEY_HINT)
    # Wrong keys are counted per client address: past a few, 429 without a lookup (throttle.py).
    address = request.client.host if request.client else None
    throttle = runtime.context.key_throttle
    throttle.check(address)
    try:
        facts = await runtime.key_cache.resolve(key)
    except SQLAlchemyError as error:
        logger.exception("could not check an API key against the database")
        raise KeyCheckUnavailable(
            "the API key could not be checked: the database did not answer",
            hint="see the server log",
        ) from error
    if facts is None:
        throttle.failed(address)
        raise InvalidApiKey(f"API key {display_prefix(key)}... is not valid", hint=_KEY_HINT)
    if facts.revoked:
        throttle.failed(address)
        raise InvalidApiKey(f"API key {facts.name!r} was revoked", hint="ask an admin for a new key")
    throttle.succeeded(address)
    return facts


def visible_deployments(runtime: GatewayRuntime, facts: KeyFacts) -> list[str]:
    """The deployment names this key may see, sorted."""
    return [name for name in runtime.context.endpoints.known_deployments() if facts.may_use(name)]


def parse_request_body(
    body: bytes, max_json_depth: int = RequestLimits.max_json_depth
) -> tuple[dict[str, Any], str]:
    """The JSON object of the body and its ``model``."""
    if json_nesting_exceeds(body, max_json_depth):
        raise InvalidJsonBody(
            f"the request body nests deeper than {max_json_depth} levels",
            hint="flatten the request; the limit is set by "
            + RequestLimits.environment_variable("max_json_depth"),
        )
    try:
        payload = json.loads(body)
    except ValueError as error:
        raise InvalidJsonBody(
            f"the request body is not JSON ({error})",
            hint="send a JSON object with Content-Type: application/json",
        ) from error
    if not isinstance(payload, dict):
        raise InvalidJsonBody(
            f"the request body must be a JSON object, got a JSON {type(payload).__name__}",
            hint='send {"model": "...", ...}',
        )
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise MissingModel(
            'the request body has no "model"',
            hint="set it to a deployment name; GET /v1/models lists them",
        )
    return payload, model


def _visible_hint(runtime: GatewayRuntime, facts: KeyFacts, lead: str) -> str:
    names = visible_deployments(runtime, facts)
    return f"{lead}: {', '.join(names)}" if names else "no model is available to this key yet"


async def ready_endpoints(runtime: GatewayRuntime, facts: KeyFacts, model: str) -> tuple[Endpoint, ...]:
    """The ready replicas of deployment ``model`` that this key may use."""
    registry = runtime.context.endpoints
    note = registry.note_for(model)
    if note is not None and not registry.is_known(model):
        # A deployment on its way (the demo while it is prepared): "demo is being prepared (42%)".
        raise NoReadyReplica(
            note.message,
            hint="`modelyard ps` shows it once it is deployed",
            retry_after_seconds=RETRY_AFTER_WHILE_STARTING_SECONDS if note.coming else None,
        )
    if not registry.is_known(model):
        raise ModelNotFound(
            f"model {model!r} does not exist", hint=_visible_hint(runtime, facts, "known models")
        )
    if not facts.may_use(model):
        raise ModelNotAllowed(
            f"API key {facts.name!r} may not use model {model!r}",
            hint=_visible_hint(runtime, facts, "it may use"),
        )
    endpoints = registry.endpoints_for(model)
    if endpoints:
        return endpoints
    try:
        state, coming = await asyncio.to_thread(describe_unready, runtime.context.database, model)
    except SQLAlchemyError:
        logger.exception("could not read the instances of deployment %r", model)
        state, coming = "", False
    message = f"deployment {model!r} has no ready replica"
    raise NoReadyReplica(
        f"{message} {state}" if state else message,
        hint=f"see why with `modelyard ps` and `modelyard logs {model}`",
        retry_after_seconds=RETRY_AFTER_WHILE_STARTING_SECONDS if coming else None,
    )
