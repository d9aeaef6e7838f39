"""``/api/v1/keys``: gateway API keys. POST returns the key once; it is never shown again."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.server.gateway.limit_counters import SlidingCounters, current_use
from modelyard.services import keys
from modelyard.services.names import MAXIMUM_NAME_LENGTH

router = APIRouter(tags=["keys"])

# The columns are 32-bit integers.
MAXIMUM_PER_MINUTE = 2**31 - 1


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=MAXIMUM_NAME_LENGTH)
    # None: every deployment.
    allowed_deployments: (
        Annotated[list[Annotated[str, Field(max_length=MAXIMUM_NAME_LENGTH)]], Field(max_length=1024)] | None
    ) = None
    # Limits (None: none), enforced by the gateway (429 with Retry-After, OpenAI-shaped).
    requests_per_minute: int | None = Field(default=None, ge=1, le=MAXIMUM_PER_MINUTE)
    tokens_per_minute: int | None = Field(default=None, ge=1, le=MAXIMUM_PER_MINUTE)
    max_concurrent_requests: int | None = Field(default=None, ge=1, le=100_000)
    token_quota: int | None = Field(default=None, ge=1, le=10**15)
    quota_period: Literal["day", "month"] | None = None


@router.get("/keys")
async def list_keys(context: ServerContext = Depends(server_context)) -> list[dict[str, Any]]:
    """Every key; a key with limits also has ``use``: its sliding minute's requests and tokens,
    its requests running (every gateway worker together) and its quota's tokens used this period."""
    records = await in_session(context, keys.list_keys)
    quota_used = await in_session(context, keys.quota_use, records, datetime.now(UTC))
    listed = [keys.key_to_json(record) for record in records]
    gateway = context.gateway
    counters = SlidingCounters.for_keys(gateway.shared_counters()) if gateway is not None else None
    now = time.time()
    for record, shown in zip(records, listed, strict=True):
        if not any(value is not None for value in shown["limits"].values()):
            continue
        counted = counters is not None and record.revoked_at is None
        live = current_use(counters, record.id, now) if counters is not None and counted else {}
        shown["use"] = {**live, "quota_used_tokens": quota_used.get(record.id)}
    return listed


@router.post("/keys", status_code=201)
async def create_key(request: KeyCreate, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    limits = keys.KeyLimitRequest(
        requests_per_minute=request.requests_per_minute,
        tokens_per_minute=request.tokens_per_minute,
        max_concurrent_requests=request.max_concurrent_requests,
        token_quota=request.token_quota,
        quota_period=request.quota_period,
    )
    created = await in_session(context, keys.create_key, request.name, request.allowed_deployments, limits)
    context.key_cache.invalidate()
    return {**keys.key_to_json(created.record), "key": created.key}


@router.post("/keys/{name:path}/rotate")
async def rotate_key(name: str, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    """A new secret for the key (returned once); the old secret is refused from now on."""
    rotated = await in_session(context, keys.rotate_key, name)
    context.key_cache.invalidate()
    return {**keys.key_to_json(rotated.record), "key": rotated.key}


@router.delete("/keys/{name:path}")
async def revoke_key(name: str, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    record = await in_session(context, keys.revoke_key, name)
    context.key_cache.invalidate()
    return keys.key_to_json(record)
