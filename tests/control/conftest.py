"""The controller's decisions, on the runtime double: no engine process, a clock the test moves.

``controller`` is a real ``Controller`` on a real database (SQLite and PostgreSQL), whose process
runtime is ``InMemoryRuntimeDouble`` (``modelyard.testing.runtime_double``): each engine is the
engine double (the reference server playing vLLM) on a thread of this process, answering real
HTTP on loopback, launched from the command line the controller rendered. What a test does to an
engine from outside (a kill) it does to the double's host. Tests wait on events: every commit to
the store and every change of the endpoint registry wakes ``wait_for`` (no polling loop), and
back-offs and retry delays pass when the test moves the controller's clock (``ManualClock``).

The runtimes' own behaviour (processes, containers, Ray) is tested in ``tests/runtimes/``; the
controller with real engine processes, end to end, in ``tests/integration/test_controller.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select

from modelyard.control.controller import Controller, ControllerOptions
from modelyard.control.endpoints import EndpointRegistry
from modelyard.runtimes.base import EngineHandle
from modelyard.runtimes.selection import RuntimeSet
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.tables import CustomBackend, Deployment, Instance, InstanceEvent, ModelFile
from modelyard.testing.runtime_double import EngineDouble, EngineHostDouble, InMemoryRuntimeDouble

# Far above any step here (milliseconds to a second or two); reaching it fails the test by name.
WAIT_SECONDS = 30.0

VLLM_DOUBLE_SPEC: dict[str, Any] = {
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


class ManualClock:
    """The controller's clock, moved by the test: ``advance`` makes back-offs and delays pass."""

    def __init__(self) -> None:
        self.offset_seconds = 0.0

    def advance(self, seconds: float) -> None:
        self.offset_seconds += seconds

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time() + self.offset_seconds

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset_seconds)


class StoreChanges:
    """An event set on every commit to the database and every change of the endpoint registry."""

    def __init__(self, database: Database, endpoints: EndpointRegistry) -> None:
        self._loop = asyncio.get_running_loop()
        self.changed = asyncio.Event()
        self._database = database
        # After the commit (the engine's "commit" event comes before it: a read then sees the old rows).
        event.listen(database.session_factory, "after_commit", self._on_commit)
        endpoints.subscribe(self.changed.set)

    def _on_commit(self, session: object) -> None:
        # Commits come from the controller's threads (asyncio.to_thread) as well as this loop's.
        self._loop.call_soon_threadsafe(self.changed.set)

    def close(self) -> None:
        event.remove(self._database.session_factory, "after_commit", self._on_commit)


@dataclass
class ControllerHarness:
    database: Database
    settings: Settings
    endpoints: EndpointRegistry
    host: EngineHostDouble
    clock: ManualClock
    changes: StoreChanges
    controller: Controller
    options: ControllerOptions = field(default=FAST)

    # -- the store, as a user would read it ---------------------------------------------------

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

    def running_count(self, name: str = "chat") -> int:
        return sum(1 for instance in self.instances(name) if instance.state == "running")

    def first(self) -> Instance:
        return self.instances()[0]

    # -- what the user and the outside world do -------------------------------------------------

    def set_deployment(self, name: str = "chat", /, **fields: object) -> None:
        with self.database.session() as session:
            deployment = session.scalar(select(Deployment).where(Deployment.name == name))
            assert deployment is not None
            for key, value in fields.items():
                setattr(deployment, key, value)
            session.commit()
        self.controller.poke()

    def set_version_field(self, key: str, value: object) -> None:
        """Change the custom backend's version 1.0 (the user edits the backend)."""
        with self.database.session() as session:
            backend = session.scalar(select(CustomBackend).where(CustomBackend.name == "vllm-double"))
            assert backend is not None
            spec = json.loads(json.dumps(backend.spec))
            spec["versions"]["1.0"][key] = value
            backend.spec = spec
            session.commit()

    def engine(self, instance: Instance) -> EngineDouble:
        """The engine double an instance holds (by its recorded handle)."""
        assert instance.handle, f"instance {instance.replica_index} holds no engine"
        return self.host.engine_of(EngineHandle.from_json(instance.handle))

    async def stop_then_run(self, **fields: object) -> None:
        """Stop the deployment, change ``fields``, start it again (a new start of every replica)."""
        self.set_deployment("chat", desired_state="stopped", **fields)
        await self.wait_for(lambda: self.first().state == "stopped", "stopped")
        self.set_deployment(desired_state="running")

    async def new_controller(
        self,
        *,
        stop_engines: bool,
        options: ControllerOptions | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """The server restarts: this controller shuts down (its engines stopped, or left running
        as by a killed server) and a new one, with a new runtime on the same host, starts."""
        await self.controller.shutdown(stop_engines=stop_engines)
        self.options = options or self.options
        self.controller = make_controller(
            self.database, self.settings, self.endpoints, self.host, self.options, self.clock, environment
        )
        await self.controller.start()

    # -- waiting --------------------------------------------------------------------------------

    async def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        """Until ``condition`` holds, checked after every change to the store or the endpoints;
        fails naming ``what`` and the instances' states after WAIT_SECONDS."""
        try:
            async with asyncio.timeout(WAIT_SECONDS):
                while True:
                    self.changes.changed.clear()
                    if condition():
                        return
                    await self.changes.changed.wait()
        except TimeoutError:
            states = [(i.replica_index, i.state, i.reason) for i in self.instances()]
            raise AssertionError(f"timed out waiting for {what}; instances: {states}") from None


def make_controller(
    database: Database,
    settings: Settings,
    endpoints: EndpointRegistry,
    host: EngineHostDouble,
    options: ControllerOptions,
    clock: ManualClock,
    environment: Mapping[str, str] | None = None,
) -> Controller:
    """A controller whose process runtime is a new runtime double on ``host``."""
    return Controller(
        settings=settings,
        database=database,
        endpoints=endpoints,
        runtimes=RuntimeSet(process=InMemoryRuntimeDouble(host)),
        options=options,
        clock=clock,
        environment=environment,
    )


def add_deployment(
    database: Database,
    model_dir: Path,
    *,
    replicas: int = 1,
    gpus_per_replica: int = 0,
    autoscale: dict[str, Any] | None = None,
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
                gpus_per_replica=gpus_per_replica,
                backend_parameters=[],
                skip_verification=True,
                autoscale=autoscale,
            )
        )
        session.commit()


@pytest.fixture
async def harness(database_url: str, tmp_path: Path) -> AsyncIterator[ControllerHarness]:
    """A started controller with the deployment ``chat`` (one replica of the vLLM double)."""
    database = Database.open(database_url)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    add_deployment(database, model_dir)
    settings = Settings(data_dir=tmp_path / "data")
    endpoints = EndpointRegistry()
    host = EngineHostDouble()
    clock = ManualClock()
    changes = StoreChanges(database, endpoints)
    controller = make_controller(database, settings, endpoints, host, FAST, clock)
    harness = ControllerHarness(database, settings, endpoints, host, clock, changes, controller)
    await controller.start()
    try:
        yield harness
    finally:
        await harness.controller.shutdown(stop_engines=True)
        host.shut_down()
        changes.close()
        database.close()
