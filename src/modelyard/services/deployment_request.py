"""What a user asks for when they deploy: the body of ``POST /api/v1/deployments`` (and of its
preflight), and the input of ``services.deployments.create_deployment``: one model, so the API's
bounds and the service's fields cannot drift apart.

Usage::

    request = DeploymentRequest(model="qwen3-8b", backend="vllm", gpus_per_replica=2)
    deployment = create_deployment(session, request, inventory)

The bounds are at the door: generous for real use, small enough that no request is costly to
check. What they cannot say (the model exists, the flags parse, the GPUs fit) the service checks.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from modelyard.control.autoscale.config import AutoscaleConfig
from modelyard.control.endpoints import DEFAULT_ROUTING, RoutingPolicy
from modelyard.services.deployment_limits import MAXIMUM_LIMIT
from modelyard.services.names import MAXIMUM_NAME_LENGTH

MAXIMUM_REPLICAS = 64
MAXIMUM_PARAMETERS_CHARACTERS = 64 * 1024
MAXIMUM_LIST_ITEMS = 1024
MAXIMUM_ENV_NAME_CHARACTERS = 256
MAXIMUM_ENV_VALUE_CHARACTERS = 32 * 1024
MAXIMUM_GPU_INDEX = 4095

ParameterText = Annotated[str, Field(max_length=MAXIMUM_PARAMETERS_CHARACTERS)]
EnvName = Annotated[str, Field(max_length=MAXIMUM_ENV_NAME_CHARACTERS)]
EnvValue = Annotated[str, Field(max_length=MAXIMUM_ENV_VALUE_CHARACTERS)]
GpuIndex = Annotated[int, Field(ge=0, le=MAXIMUM_GPU_INDEX)]
ParameterLines = Annotated[list[ParameterText], Field(max_length=MAXIMUM_LIST_ITEMS)]
SelectorText = Annotated[str, Field(max_length=128)]


class DeploymentLimitsBody(BaseModel):
    """Limits for every key together (null or absent: none); 429 names the deployment's limit."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: int | None = Field(default=None, ge=1, le=MAXIMUM_LIMIT)
    tokens_per_minute: int | None = Field(default=None, ge=1, le=MAXIMUM_LIMIT)
    max_concurrent_requests: int | None = Field(default=None, ge=1, le=MAXIMUM_LIMIT)


class DeploymentRequest(BaseModel):
    """What a user asks for. ``name`` defaults to the model's name."""

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
    replicas: int = Field(default=1, ge=0, le=MAXIMUM_REPLICAS)
    # None: 1 when the host has GPUs and the backend uses them, else 0 (CPU).
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
    routing: RoutingPolicy = DEFAULT_ROUTING
    # Placement by memory: "auto" (from the estimate) or a size per GPU such as "20GiB"; None books
    # whole GPUs. Deployments so placed (and their replicas) may share a GPU, each engine's memory
    # knob set from it.
    gpu_memory: str | None = Field(default=None, max_length=32)
    # On a cluster (services/deployment_placement.py): only these workers (names from
    # GET /api/v1/workers), only workers with all of these labels, only GPUs whose name contains
    # gpu_model, and a replica over `nodes` hosts (a gang).
    workers: Annotated[list[SelectorText], Field(max_length=MAXIMUM_LIST_ITEMS)] = Field(default_factory=list)
    worker_labels: Annotated[dict[SelectorText, SelectorText], Field(max_length=MAXIMUM_LIST_ITEMS)] = Field(
        default_factory=dict
    )
    gpu_model: str | None = Field(default=None, max_length=128)
    nodes: int = Field(default=1, ge=1, le=16)
    limits: DeploymentLimitsBody | None = None
    # Replicas on load (docs/autoscaling.md): replicas then start within autoscale.min..max.
    autoscale: AutoscaleConfig | None = None
