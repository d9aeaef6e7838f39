"""A scale-up the GPUs cannot hold: the new replica waits with the scheduler's reason, the
autoscaler says so once as an ``unplaced`` event, and the replica starts when a GPU comes.

The GPUs are NVML doubles (``GpuInventory`` values the test changes); the engines are the vLLM
double on the runtime double. Waits are on commits and endpoint changes (``StoreChanges``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select

from modelyard.control.autoscale.loop import AutoscaleLoop, AutoscaleOptions
from modelyard.control.controller import Controller, ControllerOptions
from modelyard.control.endpoints import EndpointRegistry
from modelyard.hardware.gpus import GpuInventory
from modelyard.runtimes.selection import RuntimeSet
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.tables import AutoscaleEvent, Instance
from modelyard.testing.runtime_double import InMemoryRuntimeDouble

from .conftest import ManualClock, StoreChanges, add_deployment
from .test_controller_placement_and_clock import gpu_double

AUTOSCALE = {
    "min": 2,
    "max": 3,
    "target": {"metric": "waiting_per_replica", "value": 2},
    "stabilisation_s": 60,
    "cooldown_s": 60,
}


async def wait_for(changes: StoreChanges, condition: Callable[[], bool], what: str) -> None:
    try:
        async with asyncio.timeout(30):
            while True:
                changes.changed.clear()
                if condition():
                    return
                await changes.changed.wait()
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_an_unplaceable_scale_up_says_why_and_starts_when_a_gpu_comes(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    # One replica asked, min 2: the autoscaler's bounds ask for a second at once.
    add_deployment(database, model_dir, replicas=1, gpus_per_replica=1, autoscale=AUTOSCALE)
    inventory = [GpuInventory(gpus=[gpu_double(0)], driver_version="580.95.05")]
    endpoints = EndpointRegistry()
    changes = StoreChanges(database, endpoints)
    controller = Controller(
        settings=Settings(data_dir=tmp_path / "data"),
        database=database,
        endpoints=endpoints,
        runtimes=RuntimeSet(process=InMemoryRuntimeDouble()),
        options=ControllerOptions(tick_seconds=0.1),
        inventory_source=lambda: inventory[0],
        clock=ManualClock(),
    )
    await controller.start()
    options = AutoscaleOptions(sample_seconds=0.05)
    loop = AutoscaleLoop(database=database, endpoints=endpoints, poke=controller.poke, options=options)
    await loop.start()

    def instances() -> list[Instance]:
        with database.session() as session:
            return list(session.scalars(select(Instance).order_by(Instance.replica_index)))

    def events() -> list[AutoscaleEvent]:
        with database.session() as session:
            return list(session.scalars(select(AutoscaleEvent).order_by(AutoscaleEvent.id)))

    try:
        directions = ["up", "unplaced"]
        await wait_for(changes, lambda: [e.direction for e in events()] == directions, "the unplaced event")
        up, unplaced = events()
        assert up.reason == "1 replica(s) is outside autoscale's bounds 2..3: 1 → 2"
        assert unplaced.reason.startswith("replica 1 cannot be placed yet; the controller tries again")
        assert "needs 1 GPU(s), 0 free" in unplaced.reason and "GPU 0 held by" in unplaced.reason
        waiting = instances()[1]
        assert waiting.state == "pending" and waiting.reason.startswith("waiting for placement: ")
        # A second GPU (a worker joins, another deployment stops): the waiting replica starts there.
        inventory[0] = GpuInventory(gpus=[gpu_double(0), gpu_double(1)], driver_version="580.95.05")
        controller.poke()
        await wait_for(
            changes, lambda: [i.state for i in instances()] == ["running", "running"], "both replicas running"
        )
        assert instances()[1].gpu_ids == [1]
        assert [e.direction for e in events()] == ["up", "unplaced"]  # said once, not every sample
    finally:
        await loop.shutdown()
        await controller.shutdown(stop_engines=True)
        changes.close()
        database.close()
