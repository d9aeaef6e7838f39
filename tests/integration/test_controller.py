"""The controller with the real process runtime, starting real engine processes: what only real
processes show (a pid that lives, a SIGKILL from outside, an engine that outlives its server and is
found again by its environment markers).

The engine is the reference server (``modelyard.bench.reference_server``) playing vLLM's
contract: a double of vLLM, launched exactly as the platform launches a real engine, through a
custom backend whose command line is vLLM's. Each test runs on SQLite and on PostgreSQL. The
controller's other decisions (scaling, stops, failed starts, verification, adoption) are tested
on the runtime double in ``tests/control/``.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from sqlalchemy import select

from modelyard.control.controller import Controller, ControllerOptions
from modelyard.control.endpoints import EndpointRegistry
from modelyard.runtimes.selection import RuntimeSet
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.tables import CustomBackend, Deployment, Instance, InstanceEvent, ModelFile

WAIT_SECONDS = 60.0

VLLM_DOUBLE_SPEC = {
    "name": "vllm-double",
    "family": "custom",
    "description": "the reference server playing vLLM (a test double)",
    "default_version": "1.0",
    "versions": {
        "1.0": {
            "version": "1.0",
            "executable": "python3",
            "run_command": (
                "-m modelyard.bench.reference_server vllm serve {{model_path}} --host {{worker_ip}} "
                "--port {{port}} --served-model-name {{model_name}}"
            ),
            "reasoning_field": "reasoning",
            "stop_grace_seconds": 10.0,
        }
    },
}

FAST = ControllerOptions(
    tick_seconds=0.1, backoff_initial_seconds=0.2, backoff_max_seconds=1.0, stall_seconds=2.0
)


@dataclass
class Harness:
    database: Database
    settings: Settings
    endpoints: EndpointRegistry
    controller: Controller

    def instances(self, name: str = "chat") -> list[Instance]:
        with self.database.session() as session:
            return list(
                session.scalars(
                    select(Instance)
                    .join(Deployment)
                    .where(Deployment.name == name)
                    .order_by(Instance.replica_index)
                )
            )

    def events(self, name: str = "chat") -> list[InstanceEvent]:
        with self.database.session() as session:
            return list(
                session.scalars(
                    select(InstanceEvent)
                    .where(InstanceEvent.deployment_name == name)
                    .order_by(InstanceEvent.id)
                )
            )

    def set_deployment(self, name: str = "chat", **fields: object) -> None:
        with self.database.session() as session:
            deployment = session.scalar(select(Deployment).where(Deployment.name == name))
            assert deployment is not None
            for key, value in fields.items():
                setattr(deployment, key, value)
            session.commit()
        self.controller.poke()

    async def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        """Poll the store until ``condition`` holds; fail with ``what`` after WAIT_SECONDS."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_SECONDS
        while not condition():
            if loop.time() > deadline:
                states = [(i.replica_index, i.state, i.reason) for i in self.instances()]
                raise AssertionError(f"timed out waiting for {what}; instances: {states}")
            await asyncio.sleep(0.05)

    def running_count(self, name: str = "chat") -> int:
        return sum(1 for instance in self.instances(name) if instance.state == "running")


def _add_deployment(
    database: Database, model_dir: Path, *, replicas: int = 1, extra: list[str] | None = None
) -> None:
    with database.session() as session:
        session.add(CustomBackend(name="vllm-double", spec=VLLM_DOUBLE_SPEC))
        model = ModelFile(name="tiny", path=str(model_dir), state="valid")
        session.add(model)
        session.flush()
        session.add(
            Deployment(
                name="chat",
                model_file_id=model.id,
                backend="vllm-double",
                backend_version="1.0",
                replicas=replicas,
                backend_parameters=extra or [],
                skip_verification=True,
            )
        )
        session.commit()


@pytest.fixture
async def harness(database_url: str, tmp_path: Path) -> AsyncIterator[Harness]:
    database = Database.open(database_url)
    settings = Settings(data_dir=tmp_path / "data")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    _add_deployment(database, model_dir)
    endpoints = EndpointRegistry()
    controller = Controller(
        settings=settings, database=database, endpoints=endpoints, runtimes=RuntimeSet(), options=FAST
    )
    await controller.start()
    try:
        yield Harness(database, settings, endpoints, controller)
    finally:
        await controller.shutdown(stop_engines=True)
        database.close()


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_deployment_reaches_running_and_is_published(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    # The moment the store says running, the gateway can route to it (no "no ready replica
    # (1 running)" window until the next reconcile).
    [endpoint] = harness.endpoints.endpoints_for("chat")
    [instance] = harness.instances()
    assert instance.reason.startswith("ready in")
    assert _alive(instance.pid)
    assert instance.log_path == str(harness.settings.instances_dir / instance.uid / "start-1.log")
    assert endpoint.base_url == f"http://127.0.0.1:{instance.port}"
    assert endpoint.served_model_name == "chat"
    assert endpoint.reasoning_field == "reasoning"
    transitions = [(event.from_state, event.to_state) for event in harness.events()]
    assert ("pending", "starting") in transitions and ("starting", "running") in transitions


async def test_killed_engine_restarts_with_the_reason_recorded(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    [before] = harness.instances()
    assert before.pid is not None
    os.kill(before.pid, signal.SIGKILL)
    await harness.wait_for(
        lambda: harness.instances()[0].restart_count == 1 and harness.instances()[0].state == "running",
        "the replica running again after SIGKILL",
    )
    [after] = harness.instances()
    assert after.pid != before.pid
    assert after.start_count == 2
    reasons = [event.reason for event in harness.events() if event.to_state == "error"]
    assert any("killed by SIGKILL while running" in reason for reason in reasons), reasons
    # The first start's log is kept beside the second's.
    assert Path(after.log_path or "").name == "start-2.log"
    assert (Path(after.log_path or "").parent / "start-1.log").is_file()


async def test_restarted_controller_adopts_the_running_engine(harness: Harness) -> None:
    await harness.wait_for(lambda: harness.running_count() == 1, "replica 0 running")
    pid = harness.instances()[0].pid
    # A server killed without a chance to stop its engines: the engines live on.
    await harness.controller.shutdown(stop_engines=False)
    assert _alive(pid)
    successor = Controller(
        settings=harness.settings,
        database=harness.database,
        endpoints=harness.endpoints,
        runtimes=RuntimeSet(),
        options=FAST,
    )
    harness.controller = successor
    await successor.start()
    await harness.wait_for(lambda: harness.running_count() == 1, "adopted replica running")
    [instance] = harness.instances()
    assert instance.pid == pid
    assert any("re-adopted engine pid" in event.reason for event in harness.events())
