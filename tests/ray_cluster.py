"""One simulated Ray cluster for the whole test session (``ray.cluster_utils.Cluster``), token
authentication on, every node on 127.0.0.1.

The head has no GPUs (it is the server's node: engines of the contract suite run there on CPU);
tests add worker nodes with ``add_worker``, each with fake GPU resources and an NVML double of
its own (``modelyard.testing.nvml_double``: the node's processes import it as ``pynvml`` and read
that node's GPUs from a file). Registered once in ``tests/conftest.py`` (``pytest_plugins``):
a second ``ray.init`` in one process is not possible, so every Ray test shares this cluster.

Ray missing is a skip here and a failure under CI (``CI=true``), as Docker and PostgreSQL are.

Every test process (each pytest-xdist worker, or a plain run) gets a Ray temp folder of its own
(``RAY_TMPDIR``, set when pytest starts): the simulated cluster, and every ``ray start`` of the
servers and joins the tests start (they inherit it; a joined node uses its head's), keep their
sessions, sockets and logs there, not in the host's shared ``/tmp/ray``. So the simulated
cluster's group and the real heads' group of ``tests/cluster`` run beside each other, and beside
another test run on the same host. ``ray_sessions_folder()`` is where their session logs are.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import modelyard
from modelyard.runtimes.ray_connection import (
    RayCluster,
    connect,
    disconnect,
    ray_installed,
    token_environment,
)

SOURCE_FOLDER = str(Path(modelyard.__file__).resolve().parent.parent)
NVML_DOUBLE_FOLDER = str(Path(modelyard.__file__).resolve().parent / "testing" / "nvml_double")
GIB = 1 << 30
WORKER_LABEL = "modelyard.io/worker"
# Ray's switch for "no multi-host cluster" (named for Windows and macOS): 0 keeps addresses on loopback.
LOOPBACK_ONLY_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Where Ray keeps its sessions: ``$RAY_TMPDIR/ray`` (``/tmp/ray`` without it).
RAY_TEMP_VARIABLE = "RAY_TMPDIR"


def pytest_configure(config: pytest.Config) -> None:
    """This test process's own Ray temp folder (not on the controller of ``pytest -n``, which runs
    no test). Short, under the system's temp folder: Ray's socket paths inside it must stay
    within the 107 bytes of a Unix socket's name."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None and getattr(config.option, "numprocesses", None):
        return
    folder = tempfile.mkdtemp(prefix=f"ray-{worker or 'main'}-")
    os.environ[RAY_TEMP_VARIABLE] = folder  # read by Ray when a node or driver starts
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def ray_sessions_folder() -> Path:
    """Where this test process's Ray sessions are (``session_*/logs/``), those of the servers
    it started with ``--cluster`` included."""
    return Path(os.environ.get(RAY_TEMP_VARIABLE, tempfile.gettempdir())) / "ray"


def fake_gpu(name: str, index: int, memory_gib: float, *, used_gib: float = 0.0) -> dict[str, Any]:
    """One GPU as the NVML double reports it."""
    return {
        "name": name,
        "uuid": f"GPU-{name.replace(' ', '-').lower()}-{index}-{secrets.token_hex(4)}",
        "memory_total_bytes": int(memory_gib * GIB),
        "memory_used_bytes": int(used_gib * GIB),
        "utilization_percent": 0,
        "temperature_celsius": 35 + index,
    }


@dataclass
class WorkerNode:
    name: str
    node: Any  # ray._private.node.Node
    node_id: str
    nvml_file: Path


@dataclass
class SimulatedCluster:
    cluster: Any  # ray.cluster_utils.Cluster
    token: str
    folder: Path
    workers: dict[str, WorkerNode] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    @property
    def settings(self) -> RayCluster:
        return RayCluster(address=self.address, token=self.token)

    def add_worker(
        self, name: str, gpus: list[dict[str, Any]], labels: dict[str, str] | None = None
    ) -> WorkerNode:
        """A node that joined with these GPUs (fake ``GPU`` resources, the NVML double)."""
        nvml_file = self.folder / f"nvml-{name}.json"
        nvml_file.write_text(json.dumps({"driver_version": "580.95.05", "gpus": gpus}))
        node = self.cluster.add_node(
            num_cpus=1,
            num_gpus=len(gpus),
            node_ip_address="127.0.0.1",
            labels={WORKER_LABEL: name, **(labels or {})},
            env_vars={
                "PYTHONPATH": f"{NVML_DOUBLE_FOLDER}:{SOURCE_FOLDER}",
                "MODELYARD_NVML_DOUBLE": str(nvml_file),
                "OMP_NUM_THREADS": "1",
            },
        )
        self.cluster.wait_for_nodes()
        worker = WorkerNode(name=name, node=node, node_id=str(node.node_id), nvml_file=nvml_file)
        self.workers[name] = worker
        return worker

    def remove_worker(self, name: str) -> None:
        """The node dies (its raylet and every process of it killed)."""
        worker = self.workers.pop(name)
        self.cluster.remove_node(worker.node, allow_graceful=False)


def require_ray_for_tests() -> None:
    """Skip without Ray, except under CI, where it is a failure."""
    if not ray_installed():
        if os.environ.get("CI"):
            pytest.fail("Ray is required under CI (.ci/run installs the 'ray' extra)")
        pytest.skip("Ray is not installed (pip install 'modelyard[ray]')")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[SimulatedCluster]:
    require_ray_for_tests()
    token = secrets.token_hex(32)
    os.environ.update(token_environment(token))  # before Ray's first import: it reads them once
    # Every node and driver on 127.0.0.1: Ray would otherwise turn a loopback address into the
    # host's outward one (its "node IP from perspective"), and tests stay on loopback.
    os.environ[LOOPBACK_ONLY_VARIABLE] = "0"
    from ray.cluster_utils import Cluster

    folder = Path(tempfile.mkdtemp(prefix="modelyard-ray-test-"))
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            "labels": {WORKER_LABEL: "head"},
            "env_vars": {"PYTHONPATH": SOURCE_FOLDER, "OMP_NUM_THREADS": "1"},
            # A dead node noticed in about 1.5 s instead of Ray's default of about 15-30 s.
            "_system_config": {
                "health_check_initial_delay_ms": 500,
                "health_check_period_ms": 500,
                "health_check_timeout_ms": 500,
                "health_check_failure_threshold": 3,
            },
        },
    )
    simulated = SimulatedCluster(cluster=cluster, token=token, folder=folder)
    connect(simulated.settings)
    try:
        yield simulated
    finally:
        disconnect()
        cluster.shutdown()  # type: ignore[no-untyped-call]
