"""The cluster's workers: every Ray node with its GPUs, labels, state and when it was last seen.

``WorkerDirectory.read()`` lists Ray's nodes and runs the NVML probe (``probe.probe_gpus``) as a
task pinned to each live node, all at once, so the GPUs shown are what NVML says on that node.
A node Ray reports dead, or that has left the node table, is ``lost`` (kept in the list with its
last GPUs and when it was last seen); its engines' supervisors are gone with it, so the
controller sees them exit and places their replicas again on the ready workers. A live node
whose probe does not answer in time keeps its last GPUs. The worker's name is its
``modelyard.io/worker`` label (set by ``modelyard worker join --name``), else its address; what
its Docker can do and its engine port range are labels its join set (``capability_json``).

Usage::

    directory = WorkerDirectory()
    for status in directory.read():
        print(status.worker.name, status.state, len(status.worker.gpus))
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Literal

from modelyard.cluster.probe import probe_gpus
from modelyard.control.scheduler import Worker
from modelyard.hardware.gpus import GpuInfo
from modelyard.runtimes.docker_capability import DockerCapability
from modelyard.runtimes.engine_ports import ENGINE_PORTS_LABEL
from modelyard.runtimes.ray_names import WORKER_LABEL
from modelyard.runtimes.ray_supervisor import model_directory_problem

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_SECONDS = 10.0
# Labels Ray sets itself; not shown as the worker's.
_RAY_LABEL_PREFIX = "ray.io/"

WorkerState = Literal["ready", "lost"]


@dataclass(frozen=True)
class WorkerStatus:
    worker: Worker
    state: WorkerState
    last_seen_at: float | None
    hostname: str | None = None
    probe_problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.worker.id,
            "name": self.worker.name,
            "address": self.worker.host,
            "state": self.state,
            "labels": dict(self.worker.labels),
            "hostname": self.hostname,
            "last_seen_at": self.last_seen_at,
            "probe_problem": self.probe_problem,
            "gpus": [gpu.to_json() for gpu in self.worker.gpus],
            **capability_json(self.worker.labels),
        }


def capability_json(labels: dict[str, str] | Any) -> dict[str, Any]:
    """What a worker's join recorded in its labels: ``docker`` (``engine``: ready, unreachable,
    not-installed; ``gpus``: nvidia, cdi, none; null when not recorded) and ``engine_ports``
    (``"30000-30099"``, null: any free port)."""
    capability = DockerCapability.from_labels(labels)
    return {
        "docker": None if capability is None else capability.to_json(),
        "engine_ports": labels.get(ENGINE_PORTS_LABEL),
    }


def _gpu(data: dict[str, Any]) -> GpuInfo:
    fields = set(GpuInfo.__dataclass_fields__)
    return GpuInfo(**{key: value for key, value in data.items() if key in fields})


class WorkerDirectory:
    """Reads the workers; remembers each one's last GPUs and when it was last seen."""

    def __init__(self, *, probe_timeout_seconds: float = PROBE_TIMEOUT_SECONDS) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._ray = ray
        self._strategy = NodeAffinitySchedulingStrategy
        self._probe = ray.remote(probe_gpus)
        self._model_check = ray.remote(model_directory_problem)
        self._timeout = probe_timeout_seconds
        self._known: dict[str, WorkerStatus] = {}
        # ``run_on``'s functions as Ray remote functions, made once each.
        self._remote_functions: dict[Any, Any] = {}

    def read(self) -> list[WorkerStatus]:
        """Every worker now (blocking: run it in a thread)."""
        nodes: list[dict[str, Any]] = self._ray.nodes()  # type: ignore[no-untyped-call]
        alive = [node for node in nodes if node.get("Alive")]
        probes = {
            node["NodeID"]: self._probe.options(
                num_cpus=0, scheduling_strategy=self._strategy(node_id=node["NodeID"], soft=False)
            ).remote()
            for node in alive
        }
        ready, _ = self._ray.wait(list(probes.values()), num_returns=len(probes), timeout=self._timeout)
        done = set(ready)
        now = time.time()
        seen = set()
        for node in nodes:
            node_id = str(node["NodeID"])
            seen.add(node_id)
            labels = {
                str(key): str(value)
                for key, value in (node.get("Labels") or {}).items()
                if not str(key).startswith(_RAY_LABEL_PREFIX)
            }
            address = str(node.get("NodeManagerAddress", ""))
            name = labels.get(WORKER_LABEL) or address
            known = self._known.get(node_id)
            if not node.get("Alive"):
                if known is not None:
                    self._known[node_id] = replace(
                        known, state="lost", worker=replace(known.worker, ready=False)
                    )
                continue
            reference = probes[node_id]
            gpus = known.worker.gpus if known else ()
            hostname = known.hostname if known else None
            problem: str | None = "the NVML probe did not answer in time"
            last_seen = known.last_seen_at if known else None
            if reference in done:
                try:
                    answer = self._ray.get(reference)
                    gpus = tuple(_gpu(gpu) for gpu in answer.get("gpus", []))
                    hostname = answer.get("hostname")
                    problem = answer.get("unavailable_reason") if not gpus else None
                    last_seen = now
                except self._ray.exceptions.RayError as error:
                    problem = f"the NVML probe failed: {error}"
            worker = Worker(id=node_id, name=name, host=address, gpus=gpus, labels=labels, ready=True)
            self._known[node_id] = WorkerStatus(worker, "ready", last_seen, hostname, problem)
        for node_id, status in list(self._known.items()):
            if node_id not in seen and status.state != "lost":
                self._known[node_id] = replace(
                    status, state="lost", worker=replace(status.worker, ready=False)
                )
        return self.last_read()

    def workers(self) -> list[Worker]:
        """The workers for placement (``Controller(workers_source=...)``)."""
        return [status.worker for status in self.read()]

    def model_directory_problems(self, model_path: str) -> tuple[list[str], dict[str, str]]:
        """The ready workers with GPUs (by name), and what is wrong with ``model_path`` on each
        one that cannot serve it: the doctor's inspection run as a task on each (blocking)."""
        workers = [
            status.worker for status in self.last_read() if status.state == "ready" and status.worker.gpus
        ]
        references = {
            worker.name: self._model_check.options(
                num_cpus=0, scheduling_strategy=self._strategy(node_id=worker.id, soft=False)
            ).remote(model_path)
            for worker in workers
        }
        ready, _ = self._ray.wait(
            list(references.values()), num_returns=len(references), timeout=self._timeout
        )
        done = set(ready)
        problems: dict[str, str] = {}
        for name, reference in references.items():
            if reference not in done:
                problems[name] = f"the check did not answer within {self._timeout:.0f} s"
                continue
            try:
                answer = self._ray.get(reference)
            except self._ray.exceptions.RayError as error:
                problems[name] = f"the check failed: {error}"
                continue
            if answer is not None:
                problems[name] = str(answer)
        return [worker.name for worker in workers], problems

    def node_id_of(self, worker: str) -> str | None:
        """The Ray node id of the ready worker named ``worker`` (None: no such ready worker)."""
        for status in self.last_read():
            if status.state == "ready" and worker in (status.worker.name, status.worker.id):
                return status.worker.id
        return None

    def run_on(self, worker: str, function: Any, *arguments: Any) -> Any:
        """``function(*arguments)`` as a Ray task on the ready worker named ``worker`` (blocking,
        up to the probe timeout); ``LookupError`` when it is not ready, ``TimeoutError`` when it
        does not answer."""
        node_id = self.node_id_of(worker)
        if node_id is None:
            raise LookupError(worker)
        remote = self._remote_functions.get(function)
        if remote is None:
            remote = self._remote_functions[function] = self._ray.remote(function)
        reference = remote.options(
            num_cpus=0, scheduling_strategy=self._strategy(node_id=node_id, soft=False)
        ).remote(*arguments)
        ready, _ = self._ray.wait([reference], timeout=self._timeout * 3)
        if not ready:
            self._ray.cancel(reference, force=True)
            raise TimeoutError(f"worker {worker} did not answer within {self._timeout * 3:.0f} s")
        return self._ray.get(reference)

    def last_read(self) -> list[WorkerStatus]:
        """The workers as last read, without reading again (the API's view; any thread)."""
        known = list(self._known.values())
        return sorted(known, key=lambda status: (status.state != "ready", status.worker.name))
