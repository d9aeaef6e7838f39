"""``/api/v1/deployments``: desired state. Every write pokes the controller.

Routes with a suffix (``/stop``, ``/events``, ``/logs``) are declared before the bare
``/{name}`` routes because names may contain ``/`` (``org/model``).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from modelyard.control.endpoints import DeploymentLimits, RoutingPolicy
from modelyard.control.scheduler import Worker
from modelyard.errors import InvalidInput
from modelyard.hardware.gpus import GpuInventory
from modelyard.runtimes.selection import RuntimeSet
from modelyard.server.api.common import in_session
from modelyard.server.context import ServerContext, server_context
from modelyard.services import deployments, instances
from modelyard.services.deployment_checks import WorkerModelCheck
from modelyard.services.deployment_limits import MAXIMUM_LIMIT, registry_limits
from modelyard.services.names import MAXIMUM_NAME_LENGTH
from modelyard.store.secret_box import SecretBox

router = APIRouter(tags=["deployments"])


# Bounds at the door: generous for real use, small enough that no request is costly to check.
MAXIMUM_PARAMETERS_CHARACTERS = 64 * 1024
MAXIMUM_LIST_ITEMS = 1024
MAXIMUM_ENV_NAME_CHARACTERS = 256
MAXIMUM_ENV_VALUE_CHARACTERS = 32 * 1024
MAXIMUM_GPU_INDEX = 4095

MAXIMUM_EVENTS = 10_000

ParameterText = Annotated[str, Field(max_length=MAXIMUM_PARAMETERS_CHARACTERS)]
EnvName = Annotated[str, Field(max_length=MAXIMUM_ENV_NAME_CHARACTERS)]
EnvValue = Annotated[str, Field(max_length=MAXIMUM_ENV_VALUE_CHARACTERS)]
GpuIndex = Annotated[int, Field(ge=0, le=MAXIMUM_GPU_INDEX)]
ParameterLines = Annotated[list[ParameterText], Field(max_length=MAXIMUM_LIST_ITEMS)]


class DeploymentLimitsBody(BaseModel):
    """Limits for every key together (null or absent: none); 429 names the deployment's limit."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: int | None = Field(default=None, ge=1, le=MAXIMUM_LIMIT)
    tokens_per_minute: int | None = Field(default=None, ge=1, le=MAXIMUM_LIMIT)
    max_concurrent_requests: int | None = Field(default=None, ge=1, le=MAXIMUM_LIMIT)


class DeploymentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        min_length=1, max_length=MAXIMUM_NAME_LENGTH, description="the model file's name (see /api/v1/models)"
    )
    name: str | None = Field(
        default=None,
        max_length=MAXIMUM_NAME_LENGTH,
        description="the name clients send as 'model'; default: the model's",
    )
    backend: str = Field(default="transformers", max_length=MAXIMUM_NAME_LENGTH)
    backend_version: str | None = Field(default=None, max_length=MAXIMUM_NAME_LENGTH)
    replicas: int = Field(default=1, ge=0, le=deployments.MAXIMUM_REPLICAS)
    gpus_per_replica: int | None = Field(default=None, ge=0, le=MAXIMUM_GPU_INDEX + 1)
    gpu_ids: list[GpuIndex] | None = Field(default=None, max_length=MAXIMUM_LIST_ITEMS)
    # One line, many lines, or a list of lines; split with shell quoting rules.
    backend_parameters: ParameterText | ParameterLines = Field(default_factory=list)
    # KEY=VALUE lines (text or list) or a mapping.
    env: (
        ParameterText
        | ParameterLines
        | Annotated[dict[EnvName, EnvValue], Field(max_length=MAXIMUM_LIST_ITEMS)]
    ) = Field(default_factory=dict)
    # Variables of env to keep secret besides those whose names say so (HF_TOKEN, *_API_KEY, ...).
    secret_env: Annotated[list[EnvName], Field(max_length=MAXIMUM_LIST_ITEMS)] = Field(default_factory=list)
    skip_verification: bool = False
    # How the gateway picks a replica: "least-outstanding", or "prefix" (prompts that begin alike
    # go to the same replica, within a load bound).
    routing: RoutingPolicy = "least-outstanding"
    # Placement by memory: "auto" (from the estimate) or a size per GPU such as "20GiB"; the
    # engine's memory knob is set from it, and deployments so placed may share a GPU.
    gpu_memory: str | None = Field(default=None, max_length=32)
    # On a cluster: only these workers (names from GET /api/v1/workers), only workers with all of
    # these labels, only GPUs whose name contains gpu_model, and a replica over `nodes` hosts.
    workers: Annotated[list[Annotated[str, Field(max_length=128)]], Field(max_length=MAXIMUM_LIST_ITEMS)] = (
        Field(default_factory=list)
    )
    worker_labels: Annotated[
        dict[Annotated[str, Field(max_length=128)], Annotated[str, Field(max_length=128)]],
        Field(max_length=MAXIMUM_LIST_ITEMS),
    ] = Field(default_factory=dict)
    gpu_model: str | None = Field(default=None, max_length=128)
    nodes: int = Field(default=1, ge=1, le=16)
    limits: DeploymentLimitsBody | None = None


class DeploymentChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int | None = Field(default=None, ge=0, le=deployments.MAXIMUM_REPLICAS)
    routing: RoutingPolicy | None = None
    # Replaces the deployment's limits whole ({} removes them all).
    limits: DeploymentLimitsBody | None = None


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
    request = deployments.DeploymentRequest(**body.model_dump())
    created = deployments.create_deployment(
        session, request, inventory, secrets, runtimes, worker_model_check, workers
    )
    return deployments.deployment_to_json(created, _now()), registry_limits(created)


def _limit(
    session: Session, name: str, limits: DeploymentLimitsBody
) -> tuple[dict[str, Any], DeploymentLimits]:
    changed = deployments.set_limits(session, name, limits.model_dump())
    return deployments.deployment_to_json(changed, _now()), registry_limits(changed)


def _list(session: Session) -> list[dict[str, Any]]:
    return [deployments.deployment_to_json(item, _now()) for item in deployments.list_deployments(session)]


def _show(session: Session, name: str) -> dict[str, Any]:
    return deployments.deployment_to_json(deployments.get_deployment(session, name), _now())


def _scale(session: Session, name: str, replicas: int, inventory: GpuInventory) -> dict[str, Any]:
    return deployments.deployment_to_json(
        deployments.scale_deployment(session, name, replicas, inventory), _now()
    )


def _route(session: Session, name: str, routing: str) -> dict[str, Any]:
    return deployments.deployment_to_json(deployments.set_routing(session, name, routing), _now())


def _set_state(session: Session, name: str, desired_state: str) -> dict[str, Any]:
    return deployments.deployment_to_json(deployments.set_desired_state(session, name, desired_state), _now())


def _events(session: Session, name: str, limit: int) -> list[dict[str, Any]]:
    return [instances.event_to_json(event) for event in instances.list_events(session, name, limit)]


@router.get("/deployments")
async def list_deployments(context: ServerContext = Depends(server_context)) -> list[dict[str, Any]]:
    return await in_session(context, _list)


@router.post("/deployments", status_code=201)
async def create_deployment(
    body: DeploymentCreate, context: ServerContext = Depends(server_context)
) -> dict[str, Any]:
    cluster = context.cluster
    result, limits = await in_session(
        context,
        _create,
        body,
        context.controller.gpu_inventory(),
        context.secrets,
        context.runtimes,
        cluster.model_directory_problems if cluster is not None else None,
        context.controller.workers(),
    )
    context.endpoints.set_routing(result["name"], body.routing)
    context.endpoints.set_limits(result["name"], limits)
    context.controller.poke()
    return result


@router.post("/deployments/{name:path}/stop")
async def stop_deployment(name: str, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    result = await in_session(context, _set_state, name, "stopped")
    context.controller.poke()
    return result


@router.post("/deployments/{name:path}/start")
async def start_deployment(name: str, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    result = await in_session(context, _set_state, name, "running")
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


@router.get("/deployments/{name:path}/events")
async def list_events(
    name: str,
    limit: int = Query(default=200, ge=1, le=MAXIMUM_EVENTS, description="how many of the newest events"),
    context: ServerContext = Depends(server_context),
) -> list[dict[str, Any]]:
    return await in_session(context, _events, name, limit)


@router.get("/deployments/{name:path}")
async def show_deployment(name: str, context: ServerContext = Depends(server_context)) -> dict[str, Any]:
    return await in_session(context, _show, name)


@router.patch("/deployments/{name:path}")
async def change_deployment(
    name: str, change: DeploymentChange, context: ServerContext = Depends(server_context)
) -> dict[str, Any]:
    if change.replicas is None and change.routing is None and change.limits is None:
        raise InvalidInput(
            "nothing to change",
            hint='send {"replicas": N}, {"routing": "prefix"} or {"limits": {"requests_per_minute": N}}',
        )
    result: dict[str, Any] = {}
    if change.limits is not None:
        result, limits = await in_session(context, _limit, name, change.limits)
        context.endpoints.set_limits(name, limits)
    if change.routing is not None:
        result = await in_session(context, _route, name, change.routing)
        context.endpoints.set_routing(name, change.routing)
    if change.replicas is not None:
        result = await in_session(context, _scale, name, change.replicas, context.controller.gpu_inventory())
    context.controller.poke()
    return result


@router.delete("/deployments/{name:path}", status_code=202)
async def remove_deployment(name: str, context: ServerContext = Depends(server_context)) -> Response:
    result = await in_session(context, _set_state, name, "deleted")
    context.controller.poke()
    return JSONResponse(result, status_code=202)
