"""Placement: which GPUs of this host an instance gets.

A GPU is booked by at most one instance at a time. A refusal says what was asked, what is free
and who holds the rest ("needs 2 GPUs, 1 free: GPU 0 held by chat/replica-0").
"""

from __future__ import annotations

from collections.abc import Mapping

from modelyard.errors import Unschedulable
from modelyard.hardware.gpus import GpuInventory


def _held_by_text(bookings: Mapping[int, str]) -> str:
    return ", ".join(f"GPU {index} held by {holder}" for index, holder in sorted(bookings.items()))


def check_request_fits(
    gpus_per_replica: int,
    gpu_ids: list[int] | None,
    replicas: int,
    inventory: GpuInventory,
    backend_supports_cpu: bool,
) -> None:
    """Refuse, before anything is stored, a GPU request this host can never satisfy.

    Bookings by other deployments are not considered here (they may end); only the hardware.
    """
    present = {gpu.index for gpu in inventory.gpus}
    if gpu_ids:
        missing = sorted(set(gpu_ids) - present)
        if missing:
            have = ", ".join(str(index) for index in sorted(present)) or "none"
            raise Unschedulable(
                f"GPU id(s) {missing} do not exist on this host (GPUs present: {have})",
                hint="pick ids from `modelyard gpus`, or ask for a count with --gpus N",
            )
        if replicas > 1:
            raise Unschedulable(
                f"explicit GPU ids {gpu_ids} cannot serve {replicas} replicas: each GPU holds one replica",
                hint="use --gpus N (GPUs per replica) to scale, or keep --replicas 1",
            )
        return
    if gpus_per_replica == 0:
        if not backend_supports_cpu:
            raise Unschedulable(
                "this backend needs a GPU and the deployment asks for none", hint="pass --gpus 1 (or more)"
            )
        return
    needed = gpus_per_replica * replicas
    if needed > len(present):
        reason = inventory.unavailable_reason or f"{len(present)} GPU(s) on this host"
        raise Unschedulable(
            f"needs {needed} GPU(s) ({replicas} replica(s) x {gpus_per_replica}), "
            f"this host has {len(present)} ({reason})",
            hint="lower --gpus or --replicas, or use a CPU backend (transformers) with --gpus 0",
        )


def place(
    *,
    gpus_per_replica: int,
    gpu_ids: list[int] | None,
    inventory: GpuInventory,
    bookings: Mapping[int, str],
) -> list[int]:
    """The GPU indices for one instance, given who holds which GPU now; raises ``Unschedulable``."""
    present = sorted(gpu.index for gpu in inventory.gpus)
    if gpu_ids:
        held = {index: bookings[index] for index in gpu_ids if index in bookings}
        missing = [index for index in gpu_ids if index not in present]
        if missing:
            raise Unschedulable(f"GPU id(s) {missing} are not on this host (present: {present or 'none'})")
        if held:
            raise Unschedulable(f"needs GPU(s) {sorted(gpu_ids)}: {_held_by_text(held)}")
        return sorted(gpu_ids)
    if gpus_per_replica == 0:
        return []
    free = [index for index in present if index not in bookings]
    if len(free) < gpus_per_replica:
        held_text = _held_by_text({i: h for i, h in bookings.items() if i in present})
        detail = f": {held_text}" if held_text else ""
        raise Unschedulable(f"needs {gpus_per_replica} GPU(s), {len(free)} free{detail}")
    # Prefer the GPUs with the most free memory, then the lowest index.
    memory_free = {gpu.index: gpu.memory_free_bytes for gpu in inventory.gpus}
    free.sort(key=lambda index: (-memory_free.get(index, 0), index))
    return sorted(free[:gpus_per_replica])
