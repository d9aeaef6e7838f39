"""The REST API, ``/api/v1``: one module per resource, every route behind the role check of
``modelyard.server.policy`` (who may call it is in its table, ``ROUTE_ACCESS``).

``create_app`` (``modelyard.server.app``) includes ``api_router`` and calls
``modelyard.server.errors.install_error_handlers``.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from modelyard.server.api import (
    audit,
    auth,
    backend_check,
    backends,
    benchmarks,
    deployment_preflight,
    deployments,
    keys,
    logs,
    models,
    presets,
    projects,
    registry_credentials,
    sessions,
    start_observations,
    system,
    tasks,
    tunes,
    usage,
    usage_report,
    usage_timeline,
    users,
    workers,
)
from modelyard.server.policy import authorize

api_router = APIRouter(prefix="/api/v1", dependencies=[Depends(authorize)])

# logs and preflight before deployments: their routes are more specific than /deployments/{name:path}.
for module in (
    system,
    auth,
    models,
    backend_check,
    tasks,
    presets,
    backends,
    registry_credentials,
    logs,
    deployment_preflight,
    deployments,
    keys,
    usage_timeline,
    usage_report,
    usage,
    benchmarks,
    tunes,
    workers,
    start_observations,
    users,
    projects,
    audit,
    sessions,
):
    api_router.include_router(module.router)
