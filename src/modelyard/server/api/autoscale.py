"""What ``/api/v1/deployments/{name}`` does with ``autoscale``: set or remove it (PATCH), and show
it with the autoscaler's last reading and decisions (``GET .../autoscale``)."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any, Protocol

from sqlalchemy.orm import Session

from modelyard.control.autoscale.config import AutoscaleConfig
from modelyard.control.autoscale.loop import AutoscaleStatus
from modelyard.control.autoscale.store import autoscale_event_to_json, list_autoscale_events
from modelyard.errors import Conflict
from modelyard.services import deployments
from modelyard.services.deployment_autoscale import set_autoscale


class AutoscaleStatusSource(Protocol):
    def status(self, deployment_name: str) -> AutoscaleStatus | None: ...

    def wake(self, deployment_name: str) -> None: ...


def set_deployment_autoscale(session: Session, name: str, config: AutoscaleConfig | None) -> dict[str, Any]:
    deployment = deployments.get_deployment(session, name)
    if deployment.desired_state == "deleted":
        raise Conflict(f"deployment {name!r} is being removed; its autoscale cannot be changed")
    set_autoscale(session, deployment, config)
    return deployments.deployment_to_json(deployments.get_deployment(session, name), time.time())


def autoscale_view(
    session: Session, name: str, limit: int, autoscaler: AutoscaleStatusSource | None
) -> dict[str, Any]:
    deployment = deployments.get_deployment(session, name)
    status = autoscaler.status(name) if autoscaler is not None and deployment.autoscale else None
    running = sum(1 for instance in deployment.instances if instance.state == "running")
    return {
        "name": deployment.name,
        "autoscale": dict(deployment.autoscale) if deployment.autoscale else None,
        "desired_replicas": deployment.replicas,
        "running_replicas": running,
        "last": asdict(status) if status is not None else None,
        "events": [
            autoscale_event_to_json(event) for event in list_autoscale_events(session, deployment.uid, limit)
        ],
    }
