"""``GET /api/v1/workers``: the hosts engines run on, with their GPUs, state, labels, last seen.

On a cluster (``serve --cluster``) these are Ray's nodes as the controller last read them (the
NVML probe task on each; Docker and the engine ports as each join recorded them); on a single
host, this host as the one worker, ``local`` (its Docker asked at each request).
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from fastapi import APIRouter, Depends

from modelyard.control.scheduler import LOCAL_WORKER
from modelyard.runtimes.docker_capability import DockerCapability
from modelyard.server.context import ServerContext, server_context

router = APIRouter(tags=["workers"])


async def _local_workers(context: ServerContext) -> list[dict[str, Any]]:
    inventory = context.controller.gpu_inventory()
    docker = await asyncio.to_thread(DockerCapability.detect)
    engine_ports = context.settings.engine_ports
    return [
        {
            "id": LOCAL_WORKER,
            "name": LOCAL_WORKER,
            "address": "127.0.0.1",
            "state": "ready",
            "labels": {},
            "hostname": socket.gethostname(),
            "last_seen_at": time.time(),
            "probe_problem": inventory.unavailable_reason,
            "gpus": [gpu.to_json() for gpu in inventory.gpus],
            "docker": docker.to_json(),
            "engine_ports": None if engine_ports is None else str(engine_ports),
        }
    ]


@router.get("/workers")
async def list_workers(context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    """Every worker: ``id``, ``name``, ``address``, ``state`` (ready, lost), ``labels``,
    ``hostname``, ``last_seen_at`` (Unix seconds), ``probe_problem``, ``gpus`` (index, name,
    memory, utilization, temperature, ...), ``docker`` (``engine``: ready, unreachable,
    not-installed; ``gpus``: nvidia, cdi, none; null when the worker's join did not record it),
    ``engine_ports`` (the range its engines' ports come from, ``"30000-30099"``; null: any).
    ``cluster``: the Ray head's address, or null."""
    cluster = context.cluster
    if cluster is None:
        return {"cluster": None, "workers": await _local_workers(context)}
    return {"cluster": cluster.address, "workers": [status.to_json() for status in cluster.statuses()]}
