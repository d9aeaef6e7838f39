"""The CLI against a real server on loopback: uvicorn in a thread, the real REST API, a SQLite file.

Engines cannot be the subject here, so the controller is a double (``InstantControllerDouble``):
on every poke it makes the database look as the real controller would once it has finished
(instances running with a log file, stopped, or gone), synchronously, or, with
``transition_seconds`` set, that long after the poke, showing ``starting``/``stopping`` meanwhile
(as a real engine takes its time).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload
from typer.testing import CliRunner, Result

from modelyard.cli.main import app as cli_app
from modelyard.control.scheduler import LOCAL_WORKER, Worker, local_worker
from modelyard.hardware.gpus import GpuInventory
from modelyard.server.api.router import api_router
from modelyard.server.context import ServerContext
from modelyard.server.errors import install_error_handlers
from modelyard.services.users import ensure_admin
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.tables import Deployment, Instance, InstanceEvent

# An env var that makes the double fail a deployment's instances, as a crashing engine would.
FAIL_VARIABLE = "ENGINE_DOUBLE_FAIL"


class InstantControllerDouble:
    """Reconciles desired state at once, without engines. Implements ``ControllerHandle``."""

    def __init__(self, database: Database, instances_dir: Path) -> None:
        self.database = database
        self.instances_dir = instances_dir
        # What the double reports as NVML's reading; a test may set GPUs here.
        self.inventory = GpuInventory(unavailable_reason="no GPUs (controller double)")
        # > 0: transitions finish this long after a poke (instances show starting/stopping first).
        self.transition_seconds = 0.0
        self._timers: list[threading.Timer] = []
        # What a verification run asked for (POST .../verify) finds: every check passes, or the
        # tool-call check fails (as with a model whose tool-call parser is missing).
        self.verification_passes = True

    def gpu_inventory(self) -> GpuInventory:
        return self.inventory

    def workers(self) -> list[Worker]:
        return [local_worker(self.gpu_inventory(), LOCAL_WORKER)]

    def poke(self) -> None:
        if self.transition_seconds > 0:
            self._show_in_progress()
            timer = threading.Timer(self.transition_seconds, self._reconcile_all)
            self._timers.append(timer)
            timer.start()
            return
        self._reconcile_all()

    def cancel_pending(self) -> None:
        for timer in self._timers:
            timer.cancel()

    def _show_in_progress(self) -> None:
        with self.database.session() as session:
            for deployment in session.scalars(select(Deployment).options(selectinload(Deployment.instances))):
                for instance in deployment.instances:
                    if deployment.desired_state == "stopped" and instance.state == "running":
                        self._move(session, deployment, instance, "stopping", "stopping: SIGTERM sent")
                    elif deployment.desired_state == "running" and instance.state in ("stopped", "pending"):
                        self._move(session, deployment, instance, "starting", "engine starting")
            session.commit()

    def _reconcile_all(self) -> None:
        with self.database.session() as session:
            for deployment in session.scalars(select(Deployment).options(selectinload(Deployment.instances))):
                self._reconcile(session, deployment)
            session.commit()

    def _reconcile(self, session: Session, deployment: Deployment) -> None:
        if deployment.desired_state == "deleted":
            session.delete(deployment)
            return
        for instance in list(deployment.instances):
            if instance.replica_index >= deployment.replicas:
                deployment.instances.remove(instance)
        existing = {instance.replica_index for instance in deployment.instances}
        for index in range(deployment.replicas):
            if index not in existing:
                deployment.instances.append(Instance(replica_index=index, state="pending"))
        session.flush()
        for instance in deployment.instances:
            if deployment.desired_state == "stopped":
                self._move(session, deployment, instance, "stopped", "stopped by request")
            elif instance.state in ("pending", "stopped", "starting"):
                self._start(session, deployment, instance)
            if instance.verification_requested_at is not None:
                self._verify(session, deployment, instance)

    def _verify(self, session: Session, deployment: Deployment, instance: Instance) -> None:
        passed = self.verification_passes
        instance.verification_requested_at = None
        instance.verified_at = datetime.now(UTC)
        instance.verification = [
            {"check_id": "verify.chat-answer", "status": "passed", "message": "answered"},
            {
                "check_id": "verify.tool-call",
                "status": "passed" if passed else "failed",
                "message": "a tool call came back" if passed else "no tool call (no --tool-call-parser?)",
            },
        ]
        if passed:
            self._move(session, deployment, instance, "running", "verification run again on request: passed")
        else:
            self._move(
                session,
                deployment,
                instance,
                "error",
                "verification run again and failed, kept out of rotation",
            )

    def _start(self, session: Session, deployment: Deployment, instance: Instance) -> None:
        instance.start_count += 1
        log = self.instances_dir / instance.uid / f"start-{instance.start_count}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"engine double start {instance.start_count}\nline 2\nline 3\n")
        instance.log_path = str(log)
        instance.port = 40000 + instance.id
        instance.started_at = datetime.now(UTC)
        if FAIL_VARIABLE in deployment.env:
            instance.diagnosis = "the engine double was told to fail"
            # As the controller does (control/failures.py): a restart after its back-off.
            instance.next_start_at = datetime.now(UTC) + timedelta(seconds=60)
            self._move(
                session, deployment, instance, "error", "engine exited with status 1; restart 1 in 60 s"
            )
        else:
            instance.handle = {"runtime": "process", "id": f"{instance.port}:0", "label": "engine double"}
            self._move(session, deployment, instance, "running", "ready: health and a tiny chat answered")

    def _move(
        self, session: Session, deployment: Deployment, instance: Instance, state: str, reason: str
    ) -> None:
        if instance.state == state:
            return
        session.add(
            InstanceEvent(
                deployment_name=deployment.name,
                deployment_uid=deployment.uid,
                instance_id=instance.id,
                instance_uid=instance.uid,
                replica_index=instance.replica_index,
                from_state=instance.state,
                to_state=state,
                reason=reason,
            )
        )
        instance.state, instance.reason = state, reason


@dataclass
class LiveServer:
    url: str
    data_dir: Path
    password: str
    database: Database
    runner: CliRunner
    controller: InstantControllerDouble

    def cli(self, *args: str, password: str | None = None, stdin: str | None = None) -> Result:
        """Run ``modelyard ARGS`` against this server, as a user on the server's host would."""
        environment = {
            "MODELYARD_URL": self.url,
            "MODELYARD_DATA_DIR": str(self.data_dir),
            "MODELYARD_PASSWORD": password,
        }
        return self.runner.invoke(cli_app, list(args), env=environment, input=stdin)


def _free_socket() -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    return listener


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[LiveServer]:
    data_dir = tmp_path / "data"
    listener = _free_socket()
    port = listener.getsockname()[1]
    settings = Settings(data_dir=data_dir, port=port, deploy_demo=False)
    database = Database.open(settings.database_url)
    password = ensure_admin(database, settings.admin_password_file)
    assert password is not None
    controller = InstantControllerDouble(database, settings.instances_dir)
    context = ServerContext(settings=settings, database=database, controller=controller)
    app = FastAPI()
    app.state.context = context
    app.include_router(api_router)
    install_error_handlers(app)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    started = threading.Event()
    for _ in range(500):
        if server.started:
            started.set()
            break
        started.wait(0.01)
    assert server.started, "the test server did not start within 5 s"
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", data_dir, password, database, CliRunner(), controller)
    finally:
        controller.cancel_pending()
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()
        database.close()
