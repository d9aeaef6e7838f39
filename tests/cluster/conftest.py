"""The controller on the session's simulated Ray cluster (``tests/ray_cluster.py``), as
``modelyard serve --cluster`` runs it: the Ray runtime for engines, the worker directory (Ray's
nodes, the NVML probe task on each) for placement. The engines are the engine double playing
vLLM (a custom backend of the vLLM family, with vLLM's multi-node flags); the GPUs are fake Ray
resources with an NVML double per node.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from modelyard.control.controller import Controller, ControllerOptions
from modelyard.control.endpoints import EndpointRegistry
from modelyard.runtimes.selection import RuntimeSet
from modelyard.settings import Settings
from modelyard.store.database import Database
from modelyard.store.tables import CustomBackend, Deployment, Instance, ModelFile
from ray_cluster import GIB, SimulatedCluster, fake_gpu

WAIT_SECONDS = 90.0
ENGINE_DOUBLE: dict[str, Any] = {
    "name": "vllm-double",
    "family": "vllm",
    "default_version": "0.25.0",
    "versions": {
        "0.25.0": {
            "version": "0.25.0",
            "executable": "python3",
            "run_command": (
                "-m modelyard.bench.reference_server vllm serve {{model_path}} --host {{worker_ip}} "
                "--port {{port}} --served-model-name {{model_name}}"
            ),
            "stop_grace_seconds": 5.0,
            "multi_node": {
                "all_ranks": (
                    "--nnodes {{nnodes}} --node-rank {{node_rank}} --master-addr {{master_addr}} "
                    "--master-port {{master_port}}"
                ),
                "worker_ranks": "--headless",
            },
        }
    },
}


@pytest.fixture(scope="module")
def two_workers(ray_cluster: SimulatedCluster) -> Iterator[SimulatedCluster]:
    """node-a and node-b, two 24 GiB GPUs each (zone a and b), for one test module."""
    ray_cluster.add_worker("node-a", [fake_gpu("NVIDIA L4", i, 24) for i in range(2)], {"zone": "a"})
    ray_cluster.add_worker("node-b", [fake_gpu("NVIDIA L4", i, 24) for i in range(2)], {"zone": "b"})
    try:
        yield ray_cluster
    finally:
        for name in ("node-a", "node-b"):
            if name in ray_cluster.workers:
                ray_cluster.remove_worker(name)


@dataclass
class ClusterSetup:
    database: Database
    controller: Controller
    cluster: SimulatedCluster

    def instances(self, name: str) -> list[Instance]:
        with self.database.session() as session:
            query = (
                select(Instance)
                .join(Deployment)
                .where(Deployment.name == name)
                .order_by(Instance.replica_index)
            )
            return list(session.scalars(query))

    def add(
        self, name: str, *, gpus: int = 1, placement: dict[str, Any] | None = None, **fields: Any
    ) -> None:
        with self.database.session() as session:
            model = session.scalar(select(ModelFile))
            assert model is not None
            session.add(
                Deployment(
                    name=name,
                    model_file_id=model.id,
                    backend="vllm-double",
                    backend_version="0.25.0",
                    gpus_per_replica=gpus,
                    backend_parameters=fields.pop("parameters", []),
                    skip_verification=True,
                    placement=placement,
                    **fields,
                )
            )
            session.commit()
        self.controller.poke()

    def remove(self, name: str) -> None:
        with self.database.session() as session:
            deployment = session.scalar(select(Deployment).where(Deployment.name == name))
            assert deployment is not None
            deployment.desired_state = "deleted"
            session.commit()
        self.controller.poke()

    async def wait_for(self, condition: Callable[[], bool], what: str) -> float:
        """Seconds until ``condition`` held."""
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_SECONDS
        while not condition():
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.05)
        return time.monotonic() - started

    def running(self, name: str) -> list[Instance]:
        return [instance for instance in self.instances(name) if instance.state == "running"]


@pytest.fixture
async def cluster_setup(
    two_workers: SimulatedCluster, tmp_path: Path, tiny_model_dir: Path
) -> AsyncIterator[ClusterSetup]:
    from modelyard.cluster.workers import WorkerDirectory
    from modelyard.runtimes.ray_runtime import RayRuntime

    database = Database.open(f"sqlite:///{tmp_path / 'modelyard.db'}")
    with database.session() as session:
        session.add(CustomBackend(name="vllm-double", spec=ENGINE_DOUBLE))
        session.add(ModelFile(name="tiny", path=str(tiny_model_dir), state="valid"))
        session.commit()
    directory = WorkerDirectory()
    controller = Controller(
        settings=Settings(data_dir=tmp_path / "data"),
        database=database,
        endpoints=EndpointRegistry(),
        runtimes=RuntimeSet(ray=RayRuntime()),
        options=ControllerOptions(
            tick_seconds=0.2, backoff_initial_seconds=0.5, backoff_max_seconds=2.0, gpu_refresh_seconds=0.5
        ),
        workers_source=directory.workers,
    )
    await controller.start()
    try:
        yield ClusterSetup(database, controller, two_workers)
    finally:
        await controller.shutdown(stop_engines=True)
        database.close()


__all__ = ["GIB", "ClusterSetup"]
