"""A deployment's events as ``GET /api/v1/deployments/{name}/events`` lists them: its instances'
transitions (``instance_events``) and the autoscaler's decisions (``autoscale_events``: a change
of replicas with its reason, scale to zero and the wake from it, a replica it asked for that cannot
be placed), merged by time, oldest first.

Each item carries ``kind``: ``"instance"`` (``instance_id``, ``replica_index``, ``from_state``,
``to_state``) or ``"autoscale"`` (``direction`` up, down or unplaced, ``from_replicas``,
``to_replicas``; the instance fields null). Both have ``deployment``, ``deployment_uid``,
``reason`` and ``at``.

Usage::

    events = deployment_events(session, "chat", limit=200)
    [event["reason"] for event in events if event["kind"] == "autoscale"]
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelyard.errors import InvalidInput, NotFound
from modelyard.services.instances import event_to_json
from modelyard.store.tables import AutoscaleEvent, Deployment, InstanceEvent


def autoscale_event_json(event: AutoscaleEvent) -> dict[str, Any]:
    """An autoscale decision in the shape of the deployment's events (instance fields null)."""
    return {
        "kind": "autoscale",
        "deployment": event.deployment_name,
        "deployment_uid": event.deployment_uid,
        "instance_id": None,
        "instance_uid": None,
        "replica_index": None,
        "from_state": None,
        "to_state": None,
        "direction": event.direction,
        "from_replicas": event.from_replicas,
        "to_replicas": event.to_replicas,
        "reason": event.reason,
        "at": event.at.isoformat(),
    }


def _transition_json(event: InstanceEvent) -> dict[str, Any]:
    return {
        "kind": "instance",
        **event_to_json(event),
        "direction": None,
        "from_replicas": None,
        "to_replicas": None,
    }


def deployment_events(session: Session, deployment_name: str, limit: int = 200) -> list[dict[str, Any]]:
    """The newest ``limit`` events of a deployment (instances' and autoscaler's), oldest first.

    For a deployment that exists, its own events only (not those of an earlier deployment of the
    same name); for a name no deployment has now, the events recorded under it (the history of
    removed deployments)."""
    if limit < 1:
        raise InvalidInput(f"limit must be 1 or more, got {limit}")
    current_uid = session.scalar(select(Deployment.uid).where(Deployment.name == deployment_name))
    transitions = select(InstanceEvent).where(InstanceEvent.deployment_name == deployment_name)
    decisions = select(AutoscaleEvent).where(AutoscaleEvent.deployment_name == deployment_name)
    if current_uid is not None:
        transitions = transitions.where(InstanceEvent.deployment_uid == current_uid)
        decisions = decisions.where(AutoscaleEvent.deployment_uid == current_uid)
    newest_transitions = session.scalars(
        transitions.order_by(InstanceEvent.at.desc(), InstanceEvent.id.desc()).limit(limit)
    ).all()
    newest_decisions = session.scalars(
        decisions.order_by(AutoscaleEvent.at.desc(), AutoscaleEvent.id.desc()).limit(limit)
    ).all()
    if not newest_transitions and not newest_decisions and current_uid is None:
        raise NotFound(f"no deployment named {deployment_name!r} and no events recorded for that name")
    # Oldest first; at the same instant a decision comes before the transitions it causes.
    merged = [(event.at, 0, event.id, autoscale_event_json(event)) for event in newest_decisions]
    merged += [(event.at, 1, event.id, _transition_json(event)) for event in newest_transitions]
    merged.sort(key=lambda item: item[:3])
    return [item[3] for item in merged[-limit:]]
