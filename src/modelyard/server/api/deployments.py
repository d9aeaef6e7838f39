"""``/api/v1/deployments``: desired state. Every write pokes the controller and is recorded in the
audit log; a member sees only the deployments of their projects (``services/projects.py``).

Routes with a suffix (``/stop``, ``/events``, ``/logs``) are declared before the bare
``/{name}`` routes because names may contain ``/`` (``org/model``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from modelyard.control.autoscale.config import AutoscaleConfig
from modelyard.control.endpoints import DeploymentLimits, RoutingPolicy
from modelyard.control.scheduler import Worker
from modelyard.errors import InvalidInput, NotFound
from modelyard.hardware.gpus import GpuInventory
from modelyard.runtimes.selection import RuntimeSet
from modelyard.server.api import autoscale as autoscale_api
from modelyard.server.api.auditing import AuditEntry, in_audited_session
from modelyard.server.api.common import in_session
from modelyard.server.auth import SignedIn
from modelyard.server.context import ServerContext, server_context
from modelyard.server.policy import authorize
from modelyard.services import deployments, projects
from modelyard.services.deployment_checks import WorkerModelCheck
from modelyard.services.deployment_events import deployment_events
from modelyard.services.deployment_limits import registry_limits
from modelyard.services.deployment_request import MAXIMUM_REPLICAS, DeploymentLimitsBody, DeploymentRequest
from modelyard.services.roles import sees_every_project
from modelyard.store.secret_box import SecretBox
from modelyard.store.tables import Deployment

router = APIRouter(tags=["deployments"])


MAXIMUM_EVENTS = 10_000


# The service's DeploymentRequest itself, under the name the OpenAPI schema has always given it.
class DeploymentCreate(DeploymentRequest):
    """A deployment to create (or to check with /deployments/preflight): every field is checked
    before anything is stored."""

    project: str | None = Field(
        default=None, max_length=64, description="the project that owns it; default: 'default'"
    )


class DeploymentChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int | None = Field(default=None, ge=0, le=MAXIMUM_REPLICAS)
    routing: RoutingPolicy | None = None
    # Replaces the deployment's limits whole ({} removes them all).
    limits: DeploymentLimitsBody | None = None
    # Replaces autoscale whole; null removes it (replicas by hand again, where it left them).
    autoscale: AutoscaleConfig | None = None


def _now() -> float:
    return time.time()


def _create(
    session: Session,
    body: DeploymentCreate,
    inventory: GpuInventory,
    secrets: SecretBox,
    runtimes: RuntimeSet,
    worker_model_check: WorkerModelCheck | None,
    workers: list[Worker],
) -> tuple[dict[str, Any], DeploymentLimits]:
    project = projects.project_for_new_object(session, body.project, None)
    request = DeploymentRequest.model_validate(body.model_dump(exclude={"project"}))
    created = deployments.create_deployment(
        session, request, inventory, secrets, runtimes, worker_model_check, workers
    )
    if created.project_id != project.id:
        created.project_id = project.id
        session.commit()
    return _shown(session, created), registry_limits(created)


def _shown(session: Session, deployment: Deployment) -> dict[str, Any]:
    """The deployment as the API shows it: the service's view and its project's name."""
    names = projects.project_names(session)
    return {**deployments.deployment_to_json(deployment, _now()), "project": names.get(deployment.project_id)}


def _visible(session: Session, name: str, user: SignedIn) -> Deployment:
    """The deployment ``name``; ``NotFound`` for a member when it is not in one of their projects."""
    deployment = deployments.get_deployment(session, name)
    visible = projects.visible_project_ids(session, user.id, user.role)
    if visible is not None and deployment.project_id not in visible:
        raise NotFound(
            f"no deployment named {name!r} in your projects", hint="GET /api/v1/deployments lists yours"
        )
    return deployment


def _limit(
    session: Session, name: str, limits: DeploymentLimitsBody
) -> tuple[dict[str, Any], DeploymentLimits]:
    changed = deployments.set_limits(session, name, limits.model_dump())
    return _shown(session, changed), registry_limits(changed)


def _list(session: Session, user: SignedIn) -> list[dict[str, Any]]:
    visible = projects.visible_project_ids(session, user.id, user.role)
    return [
        _shown(session, item)
        for item in deployments.list_deployments(session)
        if visible is None or item.project_id in visible
    ]


def _show(session: Session, name: str, user: SignedIn) -> dict[str, Any]:
    return _shown(session, _visible(session, name, user))


def _scale(session: Session, name: str, replicas: int, inventory: GpuInventory) -> dict[str, Any]:
    return _shown(session, deployments.scale_deployment(session, name, replicas, inventory))


def _route(session: Session, name: str, routing: str) -> dict[str, Any]:
    return _shown(session, deployments.set_routing(session, name, routing))


def _set_state(session: Session, name: str, desired_state: str) -> dict[str, Any]:
    return _shown(session, deployments.set_desired_state(session, name, desired_state))


def _change(
    session: Session, name: str, change: DeploymentChange, autoscale_given: bool, inventory: GpuInventory
) -> tuple[dict[str, Any], DeploymentLimits | None]:
    """Every part of one PATCH in one transaction (with its audit row: ``in_audited_session``)."""
    result: dict[str, Any] = {}
    limits: DeploymentLimits | None = None
    if autoscale_given:
        autoscale_api.set_deployment_autoscale(session, name, change.autoscale)
        result = _shown(session, deployments.get_deployment(session, name))
    if change.limits is not None:
        result, limits = _limit(session, name, change.limits)
    if change.routing is not None:
        result = _route(session, name, change.routing)
    if change.replicas is not None:
        result = _scale(session, name, change.replicas, inventory)
    return result, limits


def _entry(action: str, name: str) -> Callable[[dict[str, Any]], list[AuditEntry]]:
    """The audit row of a change to deployment ``name`` whose result is its JSON."""
    return lambda shown: [AuditEntry(action, "deployment", name, shown.get("project"))]


def _events(session: Session, name: str, limit: int, user: SignedIn) -> list[dict[str, Any]]:
    # Events outlive their deployment: only a member is asked for it to be in one of their projects.
    if not sees_every_project(user.role):
        _visible(session, name, user)
    return deployment_events(session, name, limit)


@router.get("/deployments")
async def list_deployments(
    context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> list[dict[str, Any]]:
    return await in_session(context, _list, user)


@router.post("/deployments", status_code=201)
async def create_deployment(
    body: DeploymentCreate,
    context: ServerContext = Depends(server_context),
    user: SignedIn = Depends(authorize),
) -> dict[str, Any]:
    cluster = context.cluster

    def audited(created: tuple[dict[str, Any], DeploymentLimits]) -> list[AuditEntry]:
        shown = created[0]
        details = {field: shown.get(field) for field in ("model", "backend", "backend_version", "replicas")}
        return [AuditEntry("create", "deployment", shown["name"], shown["project"], details)]

    result, limits = await in_audited_session(
        context,
        user,
        _create,
        body,
        context.controller.gpu_inventory(),
        context.secrets,
        context.runtimes,
        cluster.model_directory_problems if cluster is not None else None,
        context.controller.workers(),
        audit_entries=audited,
        # Keys of the deployment's project reach it from now on (``KeyFacts.reaches``).
        drops_key_cache=True,
    )
    context.endpoints.set_routing(result["name"], body.routing)
    context.endpoints.set_limits(result["name"], limits)
    context.controller.poke()
    return result


@router.post("/deployments/{name:path}/stop")
async def stop_deployment(
    name: str, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> dict[str, Any]:
    result = await in_audited_session(
        context, user, _set_state, name, "stopped", audit_entries=_entry("stop", name)
    )
    context.controller.poke()
    return result


@router.post("/deployments/{name:path}/start")
async def start_deployment(
    name: str, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> dict[str, Any]:
    result = await in_audited_session(
        context, user, _set_state, name, "running", audit_entries=_entry("start", name)
    )
    context.controller.poke()
    return result


def _verify(session: Session, name: str) -> dict[str, Any]:
    return deployments.deployment_to_json(deployments.request_verification(session, name), _now())


@router.post("/deployments/{name:path}/verify", status_code=202)
async def verify_deployment(name: str, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    """Run the verification suite again on the deployment's engines (202: the controller runs it;
    each instance's ``verified_at`` and ``verification`` show the result)."""
    result = await in_session(context, _verify, name)
    context.controller.poke()
    return result


@router.get("/deployments/{name:path}/autoscale")
async def show_autoscale(
    name: str,
    limit: int = Query(default=50, ge=1, le=MAXIMUM_EVENTS, description="how many of the newest decisions"),
    context: ServerContext = Depends(server_context),
) -> dict[str, Any]:
    """The deployment's autoscale settings, what the autoscaler last saw and decided, and its
    newest decisions (each with its reason) and unplaced replicas."""
    return await in_session(context, autoscale_api.autoscale_view, name, limit, context.autoscaler)


@router.get("/deployments/{name:path}/events")
async def list_events(
    name: str,
    limit: int = Query(default=200, ge=1, le=MAXIMUM_EVENTS, description="how many of the newest events"),
    context: ServerContext = Depends(server_context),
    user: SignedIn = Depends(authorize),
) -> list[dict[str, Any]]:
    return await in_session(context, _events, name, limit, user)


@router.get("/deployments/{name:path}")
async def show_deployment(
    name: str, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> dict[str, Any]:
    return await in_session(context, _show, name, user)


@router.patch("/deployments/{name:path}")
async def change_deployment(
    name: str,
    change: DeploymentChange,
    context: ServerContext = Depends(server_context),
    user: SignedIn = Depends(authorize),
) -> dict[str, Any]:
    autoscale_given = "autoscale" in change.model_fields_set
    if change.replicas is None and change.routing is None and change.limits is None and not autoscale_given:
        raise InvalidInput(
            "nothing to change",
            hint='send {"replicas": N}, {"routing": "prefix"}, {"limits": {"requests_per_minute": N}} '
            'or {"autoscale": {...}}',
        )
    action = "scale" if change.replicas is not None else "update"
    # What was sent; autoscale as stored (its defaults filled in), null when it was removed.
    details = change.model_dump(exclude_none=True, mode="json")

    def audited(changed: tuple[dict[str, Any], DeploymentLimits | None]) -> list[AuditEntry]:
        shown = changed[0]
        if autoscale_given:
            details["autoscale"] = shown.get("autoscale")
        return [AuditEntry(action, "deployment", name, shown.get("project"), details)]

    result, limits = await in_audited_session(
        context,
        user,
        _change,
        name,
        change,
        autoscale_given,
        context.controller.gpu_inventory(),
        audit_entries=audited,
    )
    if limits is not None:
        context.endpoints.set_limits(name, limits)
    if change.routing is not None:
        context.endpoints.set_routing(name, change.routing)
    context.controller.poke()
    return result


@router.delete("/deployments/{name:path}", status_code=202)
async def remove_deployment(
    name: str, context: ServerContext = Depends(server_context), user: SignedIn = Depends(authorize)
) -> Response:
    result = await in_audited_session(
        context, user, _set_state, name, "deleted", audit_entries=_entry("delete", name), drops_key_cache=True
    )
    context.controller.poke()
    return JSONResponse(result, status_code=202)
