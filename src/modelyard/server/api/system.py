"""``GET /api/v1/system`` (what this server is) and ``GET /api/v1/gpus`` (this host's GPUs)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request
from sqlalchemy import select
from sqlalchemy.orm import selectinload

from modelyard import __version__
from modelyard.demo.prepare import DEMO_DEPLOYMENT_NAME
from modelyard.demo.status import deployed_json
from modelyard.server.context import ServerContext, server_context
from modelyard.services.deployments import deployment_summary_state
from modelyard.store.tables import Deployment

router = APIRouter(tags=["system"])


def _usage_recording(context: ServerContext) -> dict[str, Any]:
    """Whether every answered request is being recorded durably (the usage journals and table)."""
    problem = context.gateway.usage_failure() if context.gateway is not None else None
    return {"ok": problem is None, "problem": problem}


def _demo(context: ServerContext) -> dict[str, Any]:
    if context.demo.state != "deployed":
        return context.demo.to_json()
    with context.database.session() as session:
        deployment = session.scalar(
            select(Deployment)
            .where(Deployment.name == DEMO_DEPLOYMENT_NAME, Deployment.desired_state != "deleted")
            .options(selectinload(Deployment.instances))
        )
        shown = None
        if deployment is not None:
            shown = {
                "state": deployment_summary_state(deployment),
                "instances": [
                    {"replica_index": i.replica_index, "state": i.state, "reason": i.reason}
                    for i in sorted(deployment.instances, key=lambda instance: instance.replica_index)
                ],
            }
    return deployed_json(context.demo, shown)


@router.get("/system")
async def read_system(request: Request, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    settings = context.settings
    base_url = settings.server_url
    database_kind = context.database.engine.url.get_backend_name()
    return {
        "version": __version__,
        "data_dir": str(settings.data_dir),
        "database": database_kind,
        "console_url": f"{base_url}/",
        "openai_base_url": f"{base_url}/v1",
        "api_url": f"{base_url}/api/v1",
        "admin_password_file": str(settings.admin_password_file),
        # The demo: state, progress_percent, stage, message, log_path; once deployed, its state is
        # the demo deployment's own (running, starting, error, ...).
        "demo": await asyncio.to_thread(_demo, context),
        # {"ok": false, "problem": "usage journal in ...: the disk is full"} while rows are at risk.
        "usage_recording": _usage_recording(context),
    }


@router.get("/gpus")
async def read_gpus(context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    return context.controller.gpu_inventory().to_json()
