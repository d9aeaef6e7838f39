"""What placement speaks in: a worker (a host that runs engines, with its GPUs and labels), a
request (GPUs per rank, ranks, whole GPUs or bytes on each, selectors) and the placement the
scheduler answers with (``scheduler.py``), one rank per worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from modelyard.hardware.gpus import GpuInfo, GpuInventory

GIB = 1 << 30
LOCAL_WORKER = "local"


def gib(value: int) -> str:
    return f"{value / GIB:.1f} GiB"


@dataclass(frozen=True)
class Worker:
    """One host that runs engines, as placement sees it."""

    id: str
    name: str
    host: str
    gpus: tuple[GpuInfo, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True


@dataclass(frozen=True)
class PlacementRequest:
    gpus_per_rank: int
    ranks: int = 1
    # None: whole GPUs; otherwise bytes on each GPU.
    memory_bytes_per_gpu: int | None = None
    gpu_ids: tuple[int, ...] | None = None
    workers: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_model: str | None = None

    @property
    def simple(self) -> bool:
        return (
            self.ranks == 1
            and self.gpus_per_rank == 1
            and self.gpu_ids is None
            and not self.workers
            and not self.labels
            and self.gpu_model is None
        )


@dataclass(frozen=True)
class RankPlacement:
    worker_id: str
    worker_name: str
    host: str
    gpu_ids: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "worker_id": self.worker_id,
            "worker_name": self.worker_name,
            "host": self.host,
            "gpu_ids": list(self.gpu_ids),
        }


@dataclass(frozen=True)
class Placement:
    ranks: tuple[RankPlacement, ...]
    memory_bytes_per_gpu: int | None = None

    @property
    def gpu_ids(self) -> list[int]:
        return list(self.ranks[0].gpu_ids) if self.ranks else []


def local_worker(inventory: GpuInventory, host: str) -> Worker:
    """This host as the only worker (the single-host server)."""
    return Worker(id=LOCAL_WORKER, name=LOCAL_WORKER, host=host, gpus=tuple(inventory.gpus))


def cluster_inventory(workers: Iterable[Worker]) -> GpuInventory:
    """Every ready worker's GPUs as one inventory (what the API checks a request against)."""
    gpus = [gpu for worker in workers if worker.ready for gpu in worker.gpus]
    return GpuInventory(gpus=gpus, unavailable_reason=None if gpus else "no ready worker has a GPU")
