"""A deployment's ``autoscale`` (``control/autoscale/config.py``): set at create time, changed or
removed with ``PATCH /api/v1/deployments/{name}`` (``{"autoscale": {...}}`` or ``null``).

While it is set the autoscaler owns ``replicas``: a change of ``replicas`` by hand is refused
(say what to do instead), and the replicas are brought within ``min``..``max`` when it is set.
Removing it keeps the replicas where the autoscaler left them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from modelyard.control.autoscale.config import AutoscaleConfig
from modelyard.errors import Conflict
from modelyard.store.tables import Deployment


def autoscale_to_json(deployment: Deployment) -> dict[str, Any] | None:
    return dict(deployment.autoscale) if deployment.autoscale else None


def apply_autoscale(deployment: Deployment, config: AutoscaleConfig | None) -> None:
    """Store ``config`` on the deployment (None: replicas by hand again), replicas within bounds."""
    if config is None:
        deployment.autoscale = None
        return
    deployment.autoscale = config.model_dump(mode="json")
    deployment.replicas = config.clamp(deployment.replicas)


def refuse_manual_replicas(deployment: Deployment) -> None:
    """Replicas set by hand while the autoscaler owns them: a Conflict saying what to do."""
    if deployment.autoscale:
        low, high = deployment.autoscale.get("min"), deployment.autoscale.get("max")
        raise Conflict(
            f"deployment {deployment.name!r} is autoscaled ({low} to {high} replicas): its replicas are "
            "set by the autoscaler",
            hint='change autoscale.min / autoscale.max, or send {"autoscale": null} to set replicas by hand',
        )


def set_autoscale(session: Session, deployment: Deployment, config: AutoscaleConfig | None) -> None:
    apply_autoscale(deployment, config)
    session.commit()
