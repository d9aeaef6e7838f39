"""The GPUs an estimate is made for: parsed from ``--gpus 2x48GB`` or read from this host (NVML).

``NGB`` and ``NGiB`` both mean N GiB of total memory: boards are sold by their GiB size ("80GB"
H100: 79.6 GiB seen by CUDA). A GPU named without a size takes the total CUDA reports for it.

Two totals, and the engines use the smaller one. NVML (and so the scheduler's inventory) reports
the board's memory; CUDA (``torch.cuda.mem_get_info``, what vLLM's ``--gpu-memory-utilization``
multiplies, vLLM v1 ``worker/utils.py: request_memory``, and what SGLang's
``get_available_gpu_memory`` reads its free memory from) sees that less the driver's
reservation: 143,771 MiB against 139.8 GiB on an H200, 81,559 MiB against 79.19 GiB on an H100.
``cuda_visible_total_bytes`` turns the one into the other, from those measured pairs or, for a
board not measured, less the largest reservation measured.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from modelyard.errors import InvalidInput
from modelyard.hardware.gpus import GpuInventory

GIB = 1 << 30

# Totals as CUDA reports them (torch.cuda.mem_get_info), in GiB, for boards named without a size.
KNOWN_GPU_TOTAL_GIB: dict[str, float] = {
    "H200": 139.8,
    "H100": 79.19,
    "H800": 79.19,
    "H20": 95.0,
    "A100": 79.15,
    "A800": 79.15,
    "L40S": 44.4,
    "L40": 44.4,
    "L20": 44.4,
    "V100": 31.7,
    "P40": 22.4,
    "A6000": 47.5,
    "A40": 44.4,
    "RTX4090": 23.6,
    "4090": 23.6,
    "RTX3090": 23.58,
    "3090": 23.58,
    "RTX5090": 31.4,
    "5090": 31.4,
    "A10": 22.0,
    "L4": 22.0,
    "T4": 14.6,
    "B200": 178.0,
}

MIB = 1 << 20
# NVML total (MiB) -> the total CUDA reports on that board, in bytes: the start logs' own figures,
# rounded down to what their two decimals allow (vLLM's "worker init memory snapshot ...
# total_memory=139.8GiB" of the H200 sweeps, docs/field-tests/memory-sweep-2026-12-06; the
# H100's "total_memory=79.19GiB" of tests/estimate/evaluation/llmd-vllm0190-*-h100-*).
MEASURED_CUDA_TOTAL_BYTES: dict[int, int] = {
    143_771: int(139.795 * GIB),  # H200 141GB, driver 580
    81_559: int(79.185 * GIB),  # H100 80GB HBM3
}
# The largest driver reservation measured, absolute (the H200's 621 MiB) and as a share of the
# board (the H100's 0.58 %): a board not measured is assumed to lose the larger of the two, so
# that a knob set against it gives the engine at least what was asked.
RESERVED_BYTES_MEASURED_MAX = max(mib * MIB - cuda for mib, cuda in MEASURED_CUDA_TOTAL_BYTES.items())
RESERVED_SHARE_MEASURED_MAX = max(1 - cuda / (mib * MIB) for mib, cuda in MEASURED_CUDA_TOTAL_BYTES.items())


def cuda_visible_total_bytes(nvml_total_bytes: int) -> int:
    """What CUDA (and so the engine's memory knob) counts of a GPU whose NVML total is
    ``nvml_total_bytes``: the measured figure for a board in ``MEASURED_CUDA_TOTAL_BYTES``, else
    the NVML total less the largest reservation measured.

        cuda_visible_total_bytes(143_771 << 20) / (1 << 30)   # 139.795 (an H200)
    """
    measured = MEASURED_CUDA_TOTAL_BYTES.get(nvml_total_bytes // MIB)
    if measured is not None and nvml_total_bytes % MIB == 0:
        return measured
    reserved = max(RESERVED_BYTES_MEASURED_MAX, math.ceil(nvml_total_bytes * RESERVED_SHARE_MEASURED_MAX))
    return max(0, nvml_total_bytes - reserved)


def driver_reserved_bytes(nvml_total_bytes: int) -> int:
    """The part of an NVML total that CUDA does not see (``cuda_visible_total_bytes``)."""
    return nvml_total_bytes - cuda_visible_total_bytes(nvml_total_bytes)


_SPEC = re.compile(
    r"^\s*(?:(\d+)\s*[x×*]\s*)?([A-Za-z0-9_-]*?)[-_ ]?(\d+(?:\.\d+)?)?\s*(gib|gb|g)?\s*$", re.I
)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU: its name, total memory and, when measured on this host, its free memory."""

    name: str
    memory_total_bytes: int
    memory_free_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _parse_one(part: str) -> list[GpuSpec]:
    match = _SPEC.match(part)
    if not match or not part.strip():
        raise InvalidInput(
            f"cannot read GPU spec {part!r}",
            hint="write COUNTxSIZE or COUNTxNAME, e.g. 2x48GB, 1x80GiB, 4xH100, H200",
        )
    count_text, name, size_text, unit = match.groups()
    count = int(count_text) if count_text else 1
    if count < 1 or count > 1024:
        raise InvalidInput(f"GPU count {count} in {part!r} is out of range", hint="use 1 to 1024 GPUs")
    if size_text and (unit or not name):
        total_gib = float(size_text)
        label = f"{name or 'GPU'} {size_text}GB".strip()
    else:
        key = (name + (size_text or "")).upper().replace("-", "").replace("_", "")
        known = KNOWN_GPU_TOTAL_GIB.get(key) or KNOWN_GPU_TOTAL_GIB.get(key.removeprefix("RTX"))
        if known is None:
            names = ", ".join(sorted(KNOWN_GPU_TOTAL_GIB))
            raise InvalidInput(
                f"unknown GPU {part!r}", hint=f"give its memory instead (e.g. 2x48GB) or one of: {names}"
            )
        total_gib = known
        label = key
    if total_gib <= 0:
        raise InvalidInput(f"GPU memory {total_gib} GiB in {part!r} must be positive")
    return [GpuSpec(name=label, memory_total_bytes=int(total_gib * GIB)) for _ in range(count)]


def parse_gpu_specs(text: str) -> list[GpuSpec]:
    """``"2x48GB"`` -> two 48 GiB GPUs; ``"1xH100,1xA100"`` -> two named GPUs; ``"H200"`` -> one."""
    gpus: list[GpuSpec] = []
    for part in text.split(","):
        gpus.extend(_parse_one(part))
    return gpus


def engine_view(name: str, nvml_total_bytes: int, nvml_free_bytes: int | None = None) -> GpuSpec:
    """A GPU read through NVML as the engine sees it through CUDA: both totals less the driver's
    reservation (``cuda_visible_total_bytes``), which NVML counts as neither used nor free."""
    reserved = driver_reserved_bytes(nvml_total_bytes)
    return GpuSpec(
        name=name,
        memory_total_bytes=nvml_total_bytes - reserved,
        memory_free_bytes=None if nvml_free_bytes is None else max(0, nvml_free_bytes - reserved),
    )


def gpu_specs_from_inventory(inventory: GpuInventory) -> list[GpuSpec]:
    """This host's GPUs with their free memory now (from ``read_gpu_inventory()``) as the engine
    sees them (``engine_view``): the totals ``modelyard estimate``, the doctor's preflight, the
    start check and the scheduler's capacity all use."""
    return [engine_view(gpu.name, gpu.memory_total_bytes, gpu.memory_free_bytes) for gpu in inventory.gpus]
