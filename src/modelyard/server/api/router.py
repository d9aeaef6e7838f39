"""The REST API, ``/api/v1``: one module per resource, every route behind admin auth.

``create_app`` (``modelyard.server.app``) includes ``api_router`` and calls
``modelyard.server.errors.install_error_handlers``.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from modelyard.server.api import auth, keys, models, system
from modelyard.server.auth import require_admin

api_router = APIRouter(prefix="/api/v1", dependencies=[Depends(require_admin)])

for module in (system, auth, models, keys):
    api_router.include_router(module.router)
