"""The REST API, ``/api/v1``: one module per resource, every route behind admin auth.

``create_app`` (``modelyard.server.app``) includes ``api_router`` and calls
``modelyard.server.errors.install_error_handlers``.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from modelyard.server.api import (
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
    registry_credentials,
    sessions,
    start_observations,
    system,
    tasks,
    usage,
    usage_timeline,
    workers,
)
from modelyard.server.auth import require_admin

api_router = APIRouter(prefix="/api/v1", dependencies=[Depends(require_admin)])

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
    usage,
    benchmarks,
    workers,
    start_observations,
    sessions,
):
    api_router.include_router(module.router)
