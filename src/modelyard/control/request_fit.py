"""Whether a deployment's GPU request can ever be met by this host's (or cluster's) hardware,
checked before anything is stored; bookings are the scheduler's (``scheduler.py``), per start.
"""

from __future__ import annotations

from modelyard.errors import Unschedulable
from modelyard.hardware.gpus import GpuInventory

_NO_GPU_HINT = (
    "run it where there are GPUs: a server on a GPU host, or a worker with GPUs joined to a "
    "`modelyard serve --cluster` (`modelyard worker join`); or deploy on CPU with --backend "
    "transformers --gpus 0"
)


def _no_gpu_reason(inventory: GpuInventory) -> str:
    return inventory.unavailable_reason or "no GPU found"


def check_request_fits(
    gpus_per_replica: int,
    gpu_ids: list[int] | None,
    replicas: int,
    inventory: GpuInventory,
    backend_supports_cpu: bool,
    *,
    by_memory: bool = False,
) -> None:
    """Refuse, before anything is stored, a GPU request this host (or cluster) can never satisfy.

    Bookings by other deployments are not considered here (they may end); only the hardware.
    ``by_memory``: the replicas are placed by memory and may share GPUs, so only one replica's
    GPUs must exist (whether they fit beside the others is the scheduler's call, per start).
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
        if replicas > 1 and not by_memory:
            raise Unschedulable(
                f"explicit GPU ids {gpu_ids} cannot serve {replicas} replicas: each GPU holds one replica",
                hint="use --gpus N (GPUs per replica) to scale, or keep --replicas 1",
            )
        return
    count = len(inventory.gpus)
    if gpus_per_replica == 0:
        if not backend_supports_cpu:
            if count == 0:
                raise Unschedulable(
                    f"this backend needs a GPU, and there is none here ({_no_gpu_reason(inventory)})",
                    hint=_NO_GPU_HINT,
                )
            raise Unschedulable(
                f"this backend needs a GPU and the deployment asks for none ({count} GPU(s) here)",
                hint="pass --gpus 1 (or more)",
            )
        return
    needed = gpus_per_replica * (1 if by_memory else replicas)
    if count == 0:
        raise Unschedulable(
            f"needs {needed} GPU(s), and there is no GPU here ({_no_gpu_reason(inventory)})",
            hint=_NO_GPU_HINT,
        )
    if needed > count:
        reason = inventory.unavailable_reason or f"{count} GPU(s) on this host"
        raise Unschedulable(
            f"needs {needed} GPU(s) ({replicas} replica(s) x {gpus_per_replica}), "
            f"this host has {count} ({reason})",
            hint="lower --gpus or --replicas, or use a CPU backend (transformers) with --gpus 0",
        )
