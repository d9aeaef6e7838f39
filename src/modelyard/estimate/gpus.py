"""The GPUs an estimate is made for: parsed from ``--gpus 2x48GB`` or read from this host (NVML).

``NGB`` and ``NGiB`` both mean N GiB of total memory: boards are sold by their GiB size ("80GB"
H100: 79.6 GiB seen by CUDA). A GPU named without a size takes the total CUDA reports for it.
"""

from __future__ import annotations

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


def gpu_specs_from_inventory(inventory: GpuInventory) -> list[GpuSpec]:
    """This host's GPUs with their free memory now (from ``read_gpu_inventory()``)."""
    return [
        GpuSpec(
            name=gpu.name, memory_total_bytes=gpu.memory_total_bytes, memory_free_bytes=gpu.memory_free_bytes
        )
        for gpu in inventory.gpus
    ]
