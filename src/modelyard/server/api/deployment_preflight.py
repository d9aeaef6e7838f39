"""``POST /api/v1/deployments/preflight``: the checks of ``POST /api/v1/deployments`` (same body),
storing nothing. Always 200 with a verdict: ``{ok, error, findings, planned}``, where ``error``
is the error that creating it now would answer (same shape as every REST error's ``error``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from sqlalchemy.orm import Session

from modelyard.control.scheduler import Worker
from modelyard.hardware.gpus import GpuInventory
from modelyard.server.api.common import in_session
from modelyard.server.api.deployments import DeploymentCreate
from modelyard.server.context import ServerContext, server_context
from modelyard.server.errors import error_body
from modelyard.services.deployment_preflight import preflight_deployment_request

router = APIRouter(tags=["deployments"])


def _preflight(
    session: Session, body: DeploymentCreate, inventory: GpuInventory, workers: list[Worker]
) -> dict[str, Any]:
    verdict = preflight_deployment_request(session, body, inventory, workers)
    error = verdict.error
    return {
        "ok": verdict.ok,
        "error": (
            error_body(error.http_status, error.message, error.code, error.hint)["error"] if error else None
        ),
        "findings": verdict.findings,
        "planned": verdict.planned(),
    }


@router.post("/deployments/preflight")
async def preflight_deployment(
    body: DeploymentCreate, context: ServerContext = Depends(server_context)
) -> dict[str, Any]:
    controller = context.controller
    return await in_session(context, _preflight, body, controller.gpu_inventory(), controller.workers())
