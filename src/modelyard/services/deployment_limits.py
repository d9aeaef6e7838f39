"""A deployment's limits for every key together: requests and tokens per minute, requests at once.

Stored on the deployment (``requests_per_minute``, ``tokens_per_minute``,
``max_concurrent_requests``; None: no limit), set at creation or by ``PATCH`` (a new set replaces
the old one whole), and handed to the gateway through the endpoint registry
(``registry.set_limits``), which every gateway worker gets in its snapshot. The gateway checks
them in ``server/gateway/limits.py``.

Usage::

    limits = checked_limits({"requests_per_minute": 600, "max_concurrent_requests": 32})
    deployment = set_limits(session, "chat", limits)
    registry.set_limits("chat", registry_limits(deployment))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.control.endpoints import DeploymentLimits
from modelyard.errors import InvalidInput
from modelyard.store.tables import Deployment

LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")
# The columns are 32-bit integers.
MAXIMUM_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class DeploymentLimitRequest:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent_requests: int | None = None


def checked_limits(values: Mapping[str, int | None] | None) -> DeploymentLimitRequest:
    """The limits asked for (a mapping of ``LIMIT_FIELDS``), or ``InvalidInput`` naming the bad one."""
    values = values or {}
    unknown = sorted(set(values) - set(LIMIT_FIELDS))
    if unknown:
        raise InvalidInput(
            f"unknown deployment limit {', '.join(unknown)}", hint=f"limits are {', '.join(LIMIT_FIELDS)}"
        )
    for name, value in values.items():
        if value is not None and (type(value) is not int or not 1 <= value <= MAXIMUM_LIMIT):
            raise InvalidInput(
                f"{name} is {value!r}; it must be a whole number from 1 to {MAXIMUM_LIMIT}",
                hint="leave it out (or null) for no limit",
            )
    return DeploymentLimitRequest(**{name: values.get(name) for name in LIMIT_FIELDS})


def apply_limits(deployment: Deployment, limits: DeploymentLimitRequest) -> None:
    deployment.requests_per_minute = limits.requests_per_minute
    deployment.tokens_per_minute = limits.tokens_per_minute
    deployment.max_concurrent_requests = limits.max_concurrent_requests


def limits_to_json(deployment: Deployment) -> dict[str, int | None]:
    return {name: getattr(deployment, name) for name in LIMIT_FIELDS}


def registry_limits(deployment: Deployment) -> DeploymentLimits:
    """What the gateway checks (counted under the deployment's id)."""
    return DeploymentLimits(
        deployment_id=deployment.id,
        requests_per_minute=deployment.requests_per_minute,
        tokens_per_minute=deployment.tokens_per_minute,
        max_concurrent_requests=deployment.max_concurrent_requests,
    )


def all_deployment_limits(session: Session) -> dict[str, DeploymentLimits]:
    """Every live deployment's limits that has any, by name (loaded into the registry at start)."""
    query = select(
        Deployment.name,
        Deployment.id,
        Deployment.requests_per_minute,
        Deployment.tokens_per_minute,
        Deployment.max_concurrent_requests,
    ).where(Deployment.desired_state != "deleted")
    found = {
        name: DeploymentLimits(deployment_id, requests_per_minute, tokens_per_minute, max_concurrent)
        for name, deployment_id, requests_per_minute, tokens_per_minute, max_concurrent in session.execute(
            query
        ).all()
    }
    return {name: limits for name, limits in found.items() if limits.any}
