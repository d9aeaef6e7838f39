"""Who may call what: the bearer key, the request body's ``model``, and the replicas to try.

Raises the gateway errors of ``errors.py``; the app turns them into error responses. Nothing here
touches the database on the way to a ready replica: keys come from ``KeyCache``, deployments from
the ``EndpointRegistry``. Only the 503 path reads instance states.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import orjson
from sqlalchemy.exc import SQLAlchemyError
from starlette.types import Receive

from modelyard.control.endpoints import Endpoint
from modelyard.server.door.json_depth import JsonDepthScanner, feed_sliced
from modelyard.server.door.limits import RequestLimits
from modelyard.server.gateway.errors import (
    EndpointNotServed,
    InvalidApiKey,
    InvalidJsonBody,
    KeyCheckUnavailable,
    MissingModel,
    ModelNotAllowed,
    ModelNotFound,
    ModelNotInProject,
    NoReadyReplica,
)
from modelyard.server.gateway.hold import hold_for_replica
from modelyard.server.gateway.keys import MISSING, KeyFacts
from modelyard.server.gateway.routing import describe_unready
from modelyard.server.gateway.runtime import GatewayRuntime
from modelyard.services.key_hashing import display_prefix

logger = logging.getLogger(__name__)

# What a 503 tells clients to wait while a replica starts or restarts (vLLM took 95 s on an H200
# after a SIGKILL; clients retrying at once only add load).
RETRY_AFTER_WHILE_STARTING_SECONDS = 5

_KEY_HINT = "an admin creates keys with `modelyard keys create NAME`"

Headers = list[tuple[bytes, bytes]]


def header(headers: Headers, name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower case) in an ASGI header list."""
    for key, value in headers:
        if key == name:
            return value
    return None


def bearer_key(headers: Headers) -> str:
    """The API key of ``Authorization: Bearer`` (OpenAI SDKs) or ``x-api-key`` (Anthropic SDKs)."""
    raw = header(headers, b"authorization")
    if raw is None:
        api_key = header(headers, b"x-api-key")
        if api_key is not None and api_key.strip():
            return api_key.decode("latin-1").strip()
        raise InvalidApiKey("no API key: send the header 'Authorization: Bearer <key>'", hint=_KEY_HINT)
    scheme, _, key = raw.decode("latin-1").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise InvalidApiKey("the Authorization header must be 'Bearer <key>'", hint=_KEY_HINT)
    return key


async def authenticate(
    runtime: GatewayRuntime, headers: Headers, client_address: str | None, request_id: str
) -> KeyFacts:
    """The facts of the request's key; ``InvalidApiKey`` when there is none or it is not valid.

    Wrong keys are counted per client address, in one table for every gateway worker
    (``server/throttle.py``): a key the cache does not know is counted before its database read,
    in the same step as the check that the address may still try, and given back when it turns
    out good; past a few, 429 without a read. A request that joins a read already under way for
    its key pays nothing unless the key is wrong; a known good key only checks that its address
    is not waiting.
    """
    key = bearer_key(headers)
    throttle = runtime.key_throttle
    cache = runtime.key_cache
    facts = cache.cached(key)
    if facts is not MISSING and facts is not None and not facts.revoked:
        throttle.check(client_address)  # the hot path: no lock while no address waits
        return facts
    charged = facts is MISSING and not cache.reading(key)
    if charged:
        throttle.charge(client_address)
    elif facts is MISSING:
        throttle.check(client_address)
    if facts is MISSING:
        try:
            facts = await cache.resolve(key)
        except SQLAlchemyError as error:
            if charged:
                throttle.refund(client_address)
            logger.exception("request %s: could not check an API key against the database", request_id)
            raise KeyCheckUnavailable(
                "the API key could not be checked: the database did not answer",
                hint="see the server log",
            ) from error
    if facts is not None and not facts.revoked:
        if charged:
            throttle.refund(client_address)
        return facts
    if not charged:
        throttle.charge(client_address)  # 429 instead of 401 past the allowance
    if facts is None:
        raise InvalidApiKey(f"API key {display_prefix(key)}... is not valid", hint=_KEY_HINT)
    raise InvalidApiKey(f"API key {facts.name!r} was revoked", hint="ask an admin for a new key")


def visible_deployments(runtime: GatewayRuntime, facts: KeyFacts) -> list[str]:
    """The deployment names this key may see, sorted."""
    return [name for name in runtime.registry.known_deployments() if facts.may_use(name)]


async def read_json_body(receive: Receive, max_json_depth: int = RequestLimits.max_json_depth) -> bytes:
    """A JSON body, its nesting checked as it arrives (server/door/json_depth.py): one that nests
    deeper than ``max_json_depth`` is refused as soon as it does, before the rest is read."""
    depth = JsonDepthScanner(max_json_depth)
    pieces: list[bytes] = []
    while True:
        message = await receive()
        piece: bytes = message.get("body", b"")
        if await feed_sliced(depth, piece):
            raise InvalidJsonBody(
                f"the request body nests deeper than {max_json_depth} levels",
                hint="flatten the request; the limit is set by "
                + RequestLimits.environment_variable("max_json_depth"),
            )
        pieces.append(piece)
        if not message.get("more_body", False):
            return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def parse_json_body(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body (read by ``read_json_body``, its nesting checked)."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        # orjson refuses lone surrogates ("\ud800"), which Python's json accepts.
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
    return payload


def model_of(value: Any) -> str:
    """The deployment a request names in ``model``."""
    if not isinstance(value, str) or not value:
        raise MissingModel(
            'the request body has no "model"',
            hint="set it to a deployment name; GET /v1/models lists them",
        )
    return value


def _visible_hint(runtime: GatewayRuntime, facts: KeyFacts, lead: str) -> str:
    names = visible_deployments(runtime, facts)
    return f"{lead}: {', '.join(names)}" if names else "no model is available to this key yet"


def check_model_access(runtime: GatewayRuntime, facts: KeyFacts, model: str) -> None:
    """``ModelNotInProject`` / ``ModelNotFound`` / ``ModelNotAllowed`` unless this key may use
    deployment ``model``
    (``NoReadyReplica`` for a deployment on its way: "demo is being prepared (42%)")."""
    # Another project's deployment is refused before anything about it is told (its state).
    if not facts.reaches(model):
        projects = ", ".join(repr(name) for name in facts.project_names) or "none"
        owner = "project" if len(facts.project_names) == 1 else "projects"
        raise ModelNotInProject(
            f"API key {facts.name!r} belongs to {owner} {projects}, and model {model!r} is a "
            "deployment of another project",
            hint=_visible_hint(runtime, facts, "it may use")
            + "; a key of the deployment's project reaches it (an admin adds you with "
            "modelyard projects add-member)",
        )
    registry = runtime.registry
    if not registry.is_known(model):
        note = registry.note_for(model)
        if note is not None:
            raise NoReadyReplica(
                note.message,
                hint="`modelyard ps` shows it once it is deployed",
                retry_after_seconds=RETRY_AFTER_WHILE_STARTING_SECONDS if note.coming else None,
            )
        raise ModelNotFound(
            f"model {model!r} does not exist", hint=_visible_hint(runtime, facts, "known models")
        )
    if not facts.may_use(model):
        raise ModelNotAllowed(
            f"API key {facts.name!r} may not use model {model!r}",
            hint=_visible_hint(runtime, facts, "it may use"),
        )


async def ready_endpoints(
    runtime: GatewayRuntime, model: str, path: str, request_id: str, receive: Receive | None = None
) -> tuple[Endpoint, ...]:
    """The ready replicas of deployment ``model`` (known, and allowed to the key) that serve ``path``;
    for one scaled to zero, once a replica is ready (``receive``: to notice the client leaving)."""
    endpoints = runtime.registry.endpoints_for(model)
    if not endpoints:
        hold = runtime.registry.hold_for(model)
        if hold is not None:  # scaled to zero: held while a replica starts (hold.py)
            endpoints = await hold_for_replica(runtime, model, hold, request_id, receive)
    if endpoints:
        served = endpoints[0].api_paths
        if path not in served:
            engine = endpoints[0]
            version = f" {engine.engine_version}" if engine.engine_version else ""
            raise EndpointNotServed(
                f"deployment {model!r} runs {engine.engine}{version}, which does not serve {path}",
                hint=f"it serves {', '.join(served)}",
            )
        return endpoints
    try:
        state, coming = await asyncio.to_thread(describe_unready, runtime.database, model)
    except SQLAlchemyError:
        logger.exception("request %s: could not read the instances of deployment %r", request_id, model)
        state, coming = "", False
    message = f"deployment {model!r} has no ready replica"
    raise NoReadyReplica(
        f"{message} {state}" if state else message,
        hint=f"see why with `modelyard ps` and `modelyard logs {model}`",
        retry_after_seconds=RETRY_AFTER_WHILE_STARTING_SECONDS if coming else None,
    )
