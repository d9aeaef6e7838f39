"""The controller with an injected GPU inventory and clock: placement on GPUs this machine does not
have, and restart back-off on a clock the test moves.

The GPUs are NVML doubles (``GpuInventory`` values); the engines run on the runtime double
(``modelyard.testing.runtime_double``: the engine double on threads of this process).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from modelyard.control.controller import Controller, ControllerOptions
from modelyard.control.endpoints import EndpointRegistry
from modelyard.hardware.gpus import GpuInfo, GpuInventory
from modelyard.runtimes.selection import RuntimeSet
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.tables import CustomBackend, Deployment, Instance, ModelFile
from modelyard.testing.runtime_double import InMemoryRuntimeDouble

from .conftest import ManualClock

WAIT_SECONDS = 60.0
ENGINE_DOUBLE = {
    "name": "vllm-double",
    "family": "custom",
    "default_version": "1.0",
    "versions": {
        "1.0": {
            "version": "1.0",
            "executable": "python3",
            "run_command": (
                "-m modelyard.bench.reference_server vllm serve {{model_path}} --host {{worker_ip}} "
                "--port {{port}} --served-model-name {{model_name}}"
            ),
            "stop_grace_seconds": 10.0,
        }
    },
}


def gpu_double(index: int) -> GpuInfo:
    total = 80 * 2**30
    return GpuInfo(
        index=index,
        uuid=f"GPU-double-{index}",
        name="NVML double",
        memory_total_bytes=total,
        memory_free_bytes=total,
        memory_used_bytes=0,
    )


@dataclass
class Setup:
    database: Database
    controller: Controller
    clock: ManualClock

    def first_state(self, name: str) -> str | None:
        instances = self.instances(name)
        return instances[0].state if instances else None

    def instances(self, name: str) -> list[Instance]:
        with self.database.session() as session:
            query = (
                select(Instance)
                .join(Deployment)
                .where(Deployment.name == name)
                .order_by(Instance.replica_index)
            )
            return list(session.scalars(query))

    def add(self, name: str, *, gpus: int = 1, parameters: list[str] | None = None) -> None:
        with self.database.session() as session:
            model = session.scalar(select(ModelFile))
            assert model is not None
            session.add(
                Deployment(
                    name=name,
                    model_file_id=model.id,
                    backend="vllm-double",
                    backend_version="1.0",
                    gpus_per_replica=gpus,
                    backend_parameters=parameters or [],
                    skip_verification=True,
                )
            )
            session.commit()
        self.controller.poke()

    async def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_SECONDS
        while not condition():
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.05)


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    with database.session() as session:
        session.add(CustomBackend(name="vllm-double", spec=ENGINE_DOUBLE))
        session.add(ModelFile(name="tiny", path=str(model_dir), state="valid"))
        session.commit()
    clock = ManualClock()
    inventory = GpuInventory(gpus=[gpu_double(0), gpu_double(1)], driver_version="580.95.05")
    controller = Controller(
        settings=Settings(data_dir=tmp_path / "data"),
        database=database,
        endpoints=EndpointRegistry(),
        runtimes=RuntimeSet(process=InMemoryRuntimeDouble()),
        options=ControllerOptions(tick_seconds=0.1, backoff_initial_seconds=30.0, backoff_max_seconds=60.0),
        inventory_source=lambda: inventory,
        clock=clock,
    )
    await controller.start()
    try:
        yield Setup(database, controller, clock)
    finally:
        await controller.shutdown(stop_engines=True)
        database.close()


async def test_instances_get_distinct_gpus_and_the_third_waits_naming_who_holds_them(setup: Setup) -> None:
    names = ("a", "b", "c")
    for name in names:
        setup.add(name)

    def by_state(state: str) -> list[str]:
        return [name for name in names for i in setup.instances(name) if i.state == state]

    await setup.wait_for(lambda: len(by_state("running")) == 2, "two replicas running on the two GPUs")
    running = by_state("running")
    assert sorted(gpu for name in running for gpu in setup.instances(name)[0].gpu_ids) == [0, 1]
    [waiting] = [name for name in names if name not in running]
    [pending] = setup.instances(waiting)
    assert pending.state == "pending"
    assert "needs 1 GPU(s), 0 free" in pending.reason and "GPU 0 held by" in pending.reason
    # A GPU freed: the waiting instance gets it.
    freed = setup.instances(running[0])[0].gpu_ids
    with setup.database.session() as session:
        deployment = session.scalar(select(Deployment).where(Deployment.name == running[0]))
        assert deployment is not None
        deployment.desired_state = "stopped"
        session.commit()
    setup.controller.poke()
    await setup.wait_for(lambda: setup.instances(waiting)[0].state == "running", "placed once a GPU is free")
    assert setup.instances(waiting)[0].gpu_ids == freed


async def test_a_failed_start_waits_for_its_back_off_on_the_controllers_clock(setup: Setup) -> None:
    setup.add("failing", parameters=["--fail-start", "CUDA error: no kernel image is available"])
    await setup.wait_for(lambda: setup.first_state("failing") == "error", "the first failure")
    [failed] = setup.instances("failing")
    assert "restart 1 in 30 s" in failed.reason
    assert failed.next_start_at is not None
    # Nothing happens while the clock stands still, however many passes run.
    for _ in range(5):
        await setup.controller.reconcile()
    assert setup.instances("failing")[0].start_count == 1
    setup.clock.advance(31)
    setup.controller.poke()
    await setup.wait_for(lambda: setup.instances("failing")[0].start_count == 2, "the restart after back-off")
