"""The gateway's rotation: which instances take requests, published to the endpoint registry.

An instance enters the rotation when its bring-up (or re-verification, or re-adoption) succeeds
and leaves it the moment it is stopped, fails or exits. ``InstanceLive.in_rotation`` is the
truth; each reconcile pass republishes every deployment from it (``publish_all``).
"""

from __future__ import annotations

from modelyard.backends.spec import DEFAULT_API_PATHS
from modelyard.control.context import ControlContext
from modelyard.control.endpoints import Endpoint
from modelyard.control.instance_store import DeploymentView


def endpoint_for(context: ControlContext, deployment: DeploymentView, instance_id: int) -> Endpoint | None:
    engine = context.live.engine(instance_id)
    if engine is None:
        return None
    version = context.version_or_none(deployment)
    return Endpoint(
        deployment_name=deployment.name,
        instance_id=instance_id,
        base_url=engine.base_url,
        served_model_name=context.served_name(deployment),
        reasoning_field=version.reasoning_field if version is not None else "reasoning_content",
        engine=context.engine_family(deployment) or "custom",
        engine_version=deployment.backend_version,
        engine_api_key=engine.api_key,
        # For the gateway: the engine's own /metrics (re-exported) and the /v1 routes it serves.
        metrics_path=version.metrics_path if version is not None else None,
        api_paths=tuple(version.api_paths) if version is not None else DEFAULT_API_PATHS,
    )


def publish_one(context: ControlContext, deployment: DeploymentView, instance_id: int) -> None:
    """Put one instance into the gateway's rotation now (the next reconcile publishes the rest)."""
    endpoint = endpoint_for(context, deployment, instance_id)
    if endpoint is None:
        return
    context.live.of(instance_id).in_rotation = True
    others = [e for e in context.endpoints.endpoints_for(deployment.name) if e.instance_id != instance_id]
    context.endpoints.publish(deployment.name, [*others, endpoint])


def unpublish_one(context: ControlContext, deployment_name: str, instance_id: int) -> None:
    """Take one instance out of the gateway's rotation now."""
    live = context.live.get(instance_id)
    if live is not None:
        live.in_rotation = False
    if not context.endpoints.is_known(deployment_name):
        return
    kept = [e for e in context.endpoints.endpoints_for(deployment_name) if e.instance_id != instance_id]
    context.endpoints.publish(deployment_name, kept)


def leave_rotation(context: ControlContext, instance_id: int) -> None:
    """``unpublish_one`` for an instance known only by id (its deployment from the last pass)."""
    deployment = context.live.deployment_of(instance_id)
    if deployment is None:
        live = context.live.get(instance_id)
        if live is not None:
            live.in_rotation = False
        return
    unpublish_one(context, deployment.name, instance_id)


def publish_all(context: ControlContext, deployment: DeploymentView) -> None:
    """The gateway's endpoints for a deployment: its instances in rotation with a live engine."""
    if deployment.desired_state == "deleted":
        return
    endpoints = []
    for instance in deployment.instances:
        if not context.live.in_rotation(instance.id):
            continue
        endpoint = endpoint_for(context, deployment, instance.id)
        if endpoint is not None:
            endpoints.append(endpoint)
    context.endpoints.publish(deployment.name, endpoints)
