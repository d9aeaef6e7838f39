"""Waiting, after a candidate's deployment is gone, until its GPUs' memory is back.

A deployment is gone from the server once its engine's processes have exited, but the driver
gives their memory back a little later: on an H100 on 2026-12-07 the next candidate's start,
0.5 s after the previous one's removal, found 71-75 GiB of the 80 GiB still held and the
server's preflight refused it ("only 4.38 GiB is free"), so vLLM's candidates were dropped
without being measured. So the deployer reads the GPUs' used memory before each start and, after
the removal, waits until every one of those GPUs is back within ``RELEASE_TOLERANCE_BYTES`` of
that reading, or until ``timeout_s`` passes (memory some other process took meanwhile is not
ours to wait for: the next start's preflight says whose it is).

Only the GPUs the server itself lists (``GET /api/v1/gpus``) are waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

RELEASE_TOLERANCE_BYTES = 512 * 2**20
POLL_SECONDS = 0.25


class GpuApi(Protocol):
    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]: ...


def gpu_memory_used(api: GpuApi, gpu_ids: list[int] | None = None) -> dict[int, int]:
    """Used bytes per GPU index as the server sees them (only ``gpu_ids`` when given); empty
    when the server lists no GPUs or cannot be asked."""
    status, data = api.request("GET", "/gpus")
    if status != 200 or not isinstance(data, dict):
        return {}
    used: dict[int, int] = {}
    for gpu in data.get("gpus") or []:
        if not isinstance(gpu, dict):
            continue
        index, used_bytes = gpu.get("index"), gpu.get("memory_used_bytes")
        wanted = gpu_ids is None or index in gpu_ids
        if isinstance(index, int) and isinstance(used_bytes, int) and wanted:
            used[index] = used_bytes
    return used


def wait_for_release(
    api: GpuApi,
    before: dict[int, int],
    *,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Wait until each GPU of ``before`` uses at most its reading there plus the tolerance; True
    once they do, False after ``timeout_s``."""
    if not before:
        return True
    deadline = clock() + timeout_s
    while True:
        now = gpu_memory_used(api, list(before))
        if all(now.get(index, 0) <= used + RELEASE_TOLERANCE_BYTES for index, used in before.items()):
            return True
        if clock() >= deadline:
            return False
        sleep(POLL_SECONDS)
