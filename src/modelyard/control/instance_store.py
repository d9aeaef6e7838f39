"""The controller's reads and writes of the store, each one short transaction.

The controller works on plain snapshots (``DeploymentView``, ``InstanceView``) so that no ORM
object crosses an ``await``. Every change of an instance goes through ``transition`` with a
typed ``Transition`` (``transitions.py``), which also appends an ``InstanceEvent`` with the
reason; an image pull's progress is the one write beside it (``record_pull_progress``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import joinedload, selectinload

from modelyard.control.states import InstanceState
from modelyard.control.transitions import Transition, records_event
from modelyard.runtimes.base import EngineHandle
from modelyard.runtimes.process import process_handle
from modelyard.store.database import Database
from modelyard.store.tables import (
    CustomBackend,
    Deployment,
    Instance,
    InstanceEvent,
    RegistryCredential,
    WorkerModel,
    new_uid,
    utc_now,
)


@dataclass(frozen=True)
class InstanceView:
    id: int
    uid: str
    replica_index: int
    state: InstanceState
    reason: str
    runtime: str
    handle: EngineHandle | None
    launch_token: str | None
    pid: int | None
    process_start_time: float | None
    host: str
    port: int | None
    gpu_ids: list[int]
    log_path: str | None
    start_count: int
    restart_count: int
    next_start_at: datetime | None
    started_at: datetime | None
    verification: list[dict[str, Any]]
    verified_at: datetime | None
    verification_requested_at: datetime | None
    # Where the current start runs (workers, ranks, memory); None: this host (older rows too).
    placement: dict[str, Any] | None = None

    def verification_due(self, now: datetime) -> bool:
        """The verification suite is to run again now: a user asked for it since it last ran, or
        the retry the controller scheduled after a failed run (a time in the future) has come."""
        requested = self.verification_requested_at
        if requested is None or requested > now:
            return False
        return self.verified_at is None or requested > self.verified_at


@dataclass(frozen=True)
class DeploymentView:
    id: int
    uid: str
    name: str
    desired_state: str
    replicas: int
    backend: str
    backend_version: str
    gpus_per_replica: int
    gpu_ids: list[int] | None
    backend_parameters: list[str]
    env: dict[str, str]
    skip_verification: bool
    model_path: str
    model_details: dict[str, Any]
    instances: list[InstanceView]
    # Memory, nodes and selectors (``deployments.placement``); empty: whole GPUs on any worker.
    placement: dict[str, Any] = field(default_factory=dict)
    model_name: str = ""
    # On a cluster: the model's copy on each worker the survey looked at (worker name -> state:
    # verified, present, missing, ...); None when no worker was looked at (a single host).
    model_copies: dict[str, str] | None = None


def _handle(instance: Instance) -> EngineHandle | None:
    if instance.handle:
        try:
            return EngineHandle.from_json(instance.handle)
        except (KeyError, ValueError):
            return None
    if instance.pid is not None and instance.process_start_time is not None:
        # An engine started by a release before the runtime contract: a process.
        return process_handle(instance.pid, instance.process_start_time)
    return None


def _instance_view(instance: Instance) -> InstanceView:
    return InstanceView(
        id=instance.id,
        uid=instance.uid,
        replica_index=instance.replica_index,
        state=InstanceState(instance.state),
        reason=instance.reason,
        runtime=instance.runtime or "process",
        handle=_handle(instance),
        launch_token=instance.launch_token,
        pid=instance.pid,
        process_start_time=instance.process_start_time,
        host=instance.host,
        port=instance.port,
        gpu_ids=list(instance.gpu_ids or []),
        log_path=instance.log_path,
        start_count=instance.start_count,
        restart_count=instance.restart_count,
        next_start_at=instance.next_start_at,
        started_at=instance.started_at,
        verification=list(instance.verification or []),
        verified_at=instance.verified_at,
        verification_requested_at=instance.verification_requested_at,
        placement=dict(instance.placement) if instance.placement else None,
    )


class InstanceStore:
    def __init__(self, database: Database) -> None:
        self._database = database

    @property
    def database(self) -> Database:
        return self._database

    def load_deployments(self) -> list[DeploymentView]:
        with self._database.session() as session:
            # One statement (a join), so one snapshot: a deployment's replica count and its
            # instances are read together. Two statements (selectinload) are two snapshots on
            # SQLite and on PostgreSQL's read committed: a count raised and a row added in one
            # commit between them read as the old count with the new row, which the pass then
            # stopped as scaled down.
            deployments = (
                session.scalars(
                    select(Deployment).options(joinedload(Deployment.instances)).order_by(Deployment.id)
                )
                .unique()
                .all()
            )
            copies: dict[int, dict[str, str]] = {}
            for model_file_id, worker, state in session.execute(
                select(WorkerModel.model_file_id, WorkerModel.worker, WorkerModel.state)
            ):
                copies.setdefault(model_file_id, {})[worker] = state
            return [
                DeploymentView(
                    id=deployment.id,
                    uid=deployment.uid,
                    name=deployment.name,
                    desired_state=deployment.desired_state,
                    replicas=deployment.replicas,
                    backend=deployment.backend,
                    backend_version=deployment.backend_version,
                    gpus_per_replica=deployment.gpus_per_replica,
                    gpu_ids=list(deployment.gpu_ids) if deployment.gpu_ids else None,
                    backend_parameters=list(deployment.backend_parameters or []),
                    env=dict(deployment.env or {}),
                    skip_verification=deployment.skip_verification,
                    model_path=deployment.model_file.path,
                    model_details=dict(deployment.model_file.details or {}),
                    instances=[_instance_view(instance) for instance in deployment.instances],
                    placement=dict(deployment.placement or {}),
                    model_name=deployment.model_file.name,
                    model_copies=copies.get(deployment.model_file_id),
                )
                for deployment in deployments
            ]

    def custom_backends_stamp(self) -> tuple[Any, ...]:
        """(rows, newest id, latest update) of the custom backends: it changes whenever one is added,
        edited or removed, so the controller rebuilds its catalog only then (one small query)."""
        with self._database.session() as session:
            row = session.execute(
                select(func.count(), func.max(CustomBackend.id), func.max(CustomBackend.updated_at))
            ).one()
            return tuple(row)

    def load_custom_backends(self) -> list[dict[str, Any]]:
        with self._database.session() as session:
            return [dict(row.spec) for row in session.scalars(select(CustomBackend)).all()]

    def registry_credential(self, name: str) -> tuple[str, str, str] | None:
        """(registry, username, sealed password) of a stored registry credential, or None."""
        with self._database.session() as session:
            row = session.scalar(select(RegistryCredential).where(RegistryCredential.name == name))
            return None if row is None else (row.registry_host, row.username, row.password)

    def create_instances(self, deployment_id: int, replica_indices: list[int]) -> None:
        with self._database.session() as session:
            for index in replica_indices:
                session.add(
                    Instance(
                        uid=new_uid(),
                        deployment_id=deployment_id,
                        replica_index=index,
                        state=InstanceState.PENDING,
                        reason="waiting for placement",
                    )
                )
            session.commit()

    def delete_instance(self, instance_id: int) -> None:
        with self._database.session() as session:
            instance = session.get(Instance, instance_id)
            if instance is not None:
                session.delete(instance)
                session.commit()

    def delete_deployment(self, deployment_id: int) -> None:
        with self._database.session() as session:
            deployment = session.get(Deployment, deployment_id)
            if deployment is not None:
                session.delete(deployment)
                session.commit()

    def transition(self, instance_id: int, change: Transition) -> bool:
        """Make ``change`` (state, reason and its columns) and record the event (for a new state,
        or when the change asks for one). Raises ``IllegalTransition`` (nothing written) when the
        state machine or the change refuses the move; False if the row is gone."""
        with self._database.session() as session:
            instance = session.get(Instance, instance_id, options=[selectinload(Instance.deployment)])
            if instance is None:
                return False
            previous = InstanceState(instance.state)
            change.check(previous, instance_id)
            instance.state = change.state
            instance.reason = change.reason
            change.apply(instance)
            instance.updated_at = utc_now()
            if records_event(change, previous):
                session.add(
                    InstanceEvent(
                        deployment_name=instance.deployment.name,
                        deployment_uid=instance.deployment.uid,
                        instance_id=instance.id,
                        instance_uid=instance.uid,
                        replica_index=instance.replica_index,
                        from_state=previous,
                        to_state=change.state,
                        reason=change.reason,
                    )
                )
            session.commit()
            return True

    def record_pull_progress(
        self, instance_id: int, image_pull: dict[str, Any] | None, reason: str | None = None
    ) -> None:
        """An image pull's progress and its reason (or, with ``image_pull`` None and no reason, its
        end with nothing pulled): written without an event, in the same state."""
        with self._database.session() as session:
            instance = session.get(Instance, instance_id)
            if instance is None:
                return
            if reason is not None:
                instance.reason = reason
            instance.image_pull = image_pull
            session.commit()
