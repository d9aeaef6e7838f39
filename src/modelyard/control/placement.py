"""Placement as the controller keeps it: which instance holds which GPU of this host.

``scheduler.place`` decides from a snapshot (the inventory and the bookings); ``GpuLedger`` is the
bookings, kept by the controller for the instances that hold an engine (booked when a launch is
recorded, released when its engine is gone).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from modelyard.control.scheduler import place
from modelyard.hardware.gpus import GpuInventory


@dataclass
class GpuLedger:
    # GPU index -> (holder label, instance id)
    _holders: dict[int, tuple[str, int]] = field(default_factory=dict)

    def book(self, instance_id: int, label: str, gpu_ids: list[int]) -> None:
        self._holders.update({gpu: (label, instance_id) for gpu in gpu_ids})

    def release(self, instance_id: int) -> None:
        for gpu in [gpu for gpu, (_, owner) in self._holders.items() if owner == instance_id]:
            del self._holders[gpu]

    def bookings(self, *, excluding: int | None = None) -> dict[int, str]:
        return {gpu: label for gpu, (label, owner) in self._holders.items() if owner != excluding}


def place_instance(
    *,
    instance_id: int,
    gpus_per_replica: int,
    gpu_ids: list[int] | None,
    inventory: GpuInventory,
    ledger: GpuLedger,
) -> list[int]:
    """The GPUs for one instance now; raises ``Unschedulable`` with who holds what."""
    return place(
        gpus_per_replica=gpus_per_replica,
        gpu_ids=gpu_ids,
        inventory=inventory,
        bookings=ledger.bookings(excluding=instance_id),
    )
