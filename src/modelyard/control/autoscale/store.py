"""The autoscaler's reads and writes of the store, each one short transaction (run in a thread).

A decision is one transaction: the deployment's ``replicas``, the ``autoscale_events`` row with
the reason and the audit log's row (actor ``autoscaler``, action ``scale``, as a user's
``modelyard scale`` is recorded), written only if the replicas are still those the decision was
made from (a user's change in between wins, and the decision is dropped).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from modelyard.control.autoscale.config import AutoscaleConfig
from modelyard.store.database import Database
from modelyard.store.tables import AuditEvent, AutoscaleEvent, Deployment, Project, UsageRecord

# The audit log's actor for the replicas the autoscaler sets (a user's changes carry their name).
AUTOSCALER_ACTOR = "autoscaler"


@dataclass(frozen=True)
class ReplicaView:
    replica_index: int
    state: str
    reason: str


@dataclass(frozen=True)
class AutoscaledView:
    """A running deployment with ``autoscale`` set, as the loop needs it."""

    id: int
    uid: str
    name: str
    replicas: int
    config: AutoscaleConfig
    instances: tuple[ReplicaView, ...]

    @property
    def running_replicas(self) -> int:
        return sum(1 for instance in self.instances if instance.state == "running")


def load_autoscaled(database: Database) -> list[AutoscaledView]:
    """Every running deployment with a valid ``autoscale`` (the API validated it when it was
    written; a row edited by hand into something invalid is skipped)."""
    with database.session() as session:
        rows = session.scalars(
            select(Deployment)
            .where(Deployment.autoscale.is_not(None), Deployment.desired_state == "running")
            .options(selectinload(Deployment.instances))
            .order_by(Deployment.id)
        ).all()
        views = []
        for row in rows:
            try:
                config = AutoscaleConfig.model_validate(row.autoscale)
            except ValidationError:
                continue
            views.append(
                AutoscaledView(
                    id=row.id,
                    uid=row.uid,
                    name=row.name,
                    replicas=row.replicas,
                    config=config,
                    instances=tuple(
                        ReplicaView(instance.replica_index, instance.state, instance.reason)
                        for instance in row.instances
                    ),
                )
            )
        return views


def apply_decision(
    database: Database, view: AutoscaledView, desired_replicas: int, direction: str, reason: str
) -> bool:
    """Set the replicas and record why; False (nothing written) when the deployment changed since
    ``view`` was read (replicas set meanwhile, autoscale removed, stopped or removed)."""
    with database.session() as session:
        row = session.get(Deployment, view.id)
        if (
            row is None
            or row.autoscale is None
            or row.desired_state != "running"
            or row.replicas != view.replicas
        ):
            return False
        row.replicas = desired_replicas
        project = session.get(Project, row.project_id)
        session.add(
            AuditEvent(
                actor=AUTOSCALER_ACTOR,
                action="scale",
                object_type="deployment",
                object_name=view.name,
                project=project.name if project is not None else None,
                details={
                    "replicas": desired_replicas,
                    "from_replicas": view.replicas,
                    "direction": direction,
                    "reason": reason,
                },
            )
        )
        session.add(
            AutoscaleEvent(
                deployment_name=view.name,
                deployment_uid=view.uid,
                direction=direction,
                from_replicas=view.replicas,
                to_replicas=desired_replicas,
                reason=reason,
            )
        )
        session.commit()
        return True


def record_unplaced(database: Database, view: AutoscaledView, reason: str) -> None:
    """A replica the autoscaler asked for cannot be placed: say why (the controller retries it)."""
    with database.session() as session:
        session.add(
            AutoscaleEvent(
                deployment_name=view.name,
                deployment_uid=view.uid,
                direction="unplaced",
                from_replicas=view.replicas,
                to_replicas=view.replicas,
                reason=reason,
            )
        )
        session.commit()


def last_activity_at(database: Database, deployment_id: int) -> datetime | None:
    """When the deployment was last used or changed, as the store knows it: its newest request
    (``usage_records``, every answered request's row, the gateway's journal replayed at start), its
    autoscaler's newest decision, or the last change to its row (deployed, started, autoscale or
    replicas set), whichever is latest. Scale to zero's idle time starts there when the loop first
    follows the deployment, so a server restart does not start it again. None: no such deployment."""
    with database.session() as session:
        row = session.get(Deployment, deployment_id)
        if row is None:
            return None
        last_request = session.scalar(
            select(func.max(UsageRecord.at)).where(
                UsageRecord.deployment_name == row.name, UsageRecord.at >= row.created_at
            )
        )
        last_decision = session.scalar(
            select(func.max(AutoscaleEvent.at)).where(AutoscaleEvent.deployment_uid == row.uid)
        )
        return max(
            moment for moment in (row.updated_at, row.created_at, last_request, last_decision) if moment
        )


def list_autoscale_events(session: Session, deployment_uid: str, limit: int = 200) -> list[AutoscaleEvent]:
    """The newest ``limit`` autoscale events of one deployment, oldest first."""
    rows = session.scalars(
        select(AutoscaleEvent)
        .where(AutoscaleEvent.deployment_uid == deployment_uid)
        .order_by(AutoscaleEvent.id.desc())
        .limit(limit)
    ).all()
    return list(reversed(rows))


def autoscale_event_to_json(event: AutoscaleEvent) -> dict[str, object]:
    return {
        "deployment": event.deployment_name,
        "direction": event.direction,
        "from_replicas": event.from_replicas,
        "to_replicas": event.to_replicas,
        "reason": event.reason,
        "at": event.at.isoformat(),
    }
