"""``GET /api/v1/start-observations``: the engine starts this installation has recorded, each with
the KV cache the estimator predicted against the one the engine logged (the correction's data,
``estimate/correction.py``); ``DELETE`` forgets them, so that the correction starts over."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Query

from modelyard.control.start_observations import list_observation_rows, reset_observations
from modelyard.server.context import ServerContext, server_context

router = APIRouter(tags=["estimate"])


@router.get("/start-observations")
async def read_start_observations(
    engine: str | None = None,
    engine_version: str | None = None,
    limit: int = Query(200, ge=1, le=2000),
    context: ServerContext = Depends(server_context),
) -> dict[str, Any]:
    rows = await asyncio.to_thread(
        list_observation_rows, context.database, engine=engine, engine_version=engine_version, limit=limit
    )
    return {"starts": rows}


@router.delete("/start-observations")
async def forget_start_observations(
    engine: str | None = None,
    gpu_model: str | None = None,
    context: ServerContext = Depends(server_context),
) -> dict[str, Any]:
    deleted = await asyncio.to_thread(
        reset_observations, context.database, engine=engine, gpu_model=gpu_model
    )
    return {"deleted": deleted}
