"""The GPUs of this host, read through NVML (nvidia-ml-py). No NVIDIA driver: no GPUs, no error.

Usage::

    inventory = read_gpu_inventory()
    if not inventory.available:
        print(inventory.unavailable_reason)  # e.g. "NVML not found: no NVIDIA driver on this host"
    for gpu in inventory.gpus:
        print(gpu.index, gpu.name, gpu.memory_free_bytes)
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_total_bytes: int
    memory_free_bytes: int
    memory_used_bytes: int
    utilization_percent: int | None = None
    temperature_celsius: int | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None
    pcie_max_generation: int | None = None
    pcie_max_width: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuInventory:
    gpus: list[GpuInfo] = field(default_factory=list)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    # Why there are no GPUs, when there are none ("NVML not found: ...").
    unavailable_reason: str | None = None

    @property
    def available(self) -> bool:
        return bool(self.gpus)

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": [gpu.to_json() for gpu in self.gpus],
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "unavailable_reason": self.unavailable_reason,
        }


def _optional(read: Any, *args: Any) -> Any:
    """NVML raises for fields a board does not support; those become None."""
    import pynvml

    try:
        return read(*args)
    except pynvml.NVMLError:
        return None


def read_gpu_inventory() -> GpuInventory:
    """Read every GPU NVML sees. Never raises: a host without NVML has an empty inventory."""
    try:
        import pynvml
    except ImportError:
        return GpuInventory(unavailable_reason="nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return GpuInventory(unavailable_reason=f"NVML not available ({error}): no NVIDIA driver on this host")
    try:
        driver = _optional(pynvml.nvmlSystemGetDriverVersion)
        cuda = _optional(pynvml.nvmlSystemGetCudaDriverVersion_v2)
        cuda_text = f"{cuda // 1000}.{(cuda % 1000) // 10}" if isinstance(cuda, int) else None
        gpus = [_read_one(pynvml, index) for index in range(pynvml.nvmlDeviceGetCount())]
        return GpuInventory(
            gpus=gpus,
            driver_version=driver if isinstance(driver, str) else None,
            cuda_driver_version=cuda_text,
            unavailable_reason=None if gpus else "NVML sees no GPUs",
        )
    finally:
        pynvml.nvmlShutdown()


def _read_one(pynvml: Any, index: int) -> GpuInfo:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    utilization = _optional(pynvml.nvmlDeviceGetUtilizationRates, handle)
    power_mw = _optional(pynvml.nvmlDeviceGetPowerUsage, handle)
    limit_mw = _optional(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    name = pynvml.nvmlDeviceGetName(handle)
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    return GpuInfo(
        index=index,
        uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
        name=name.decode() if isinstance(name, bytes) else str(name),
        memory_total_bytes=int(memory.total),
        memory_free_bytes=int(memory.free),
        memory_used_bytes=int(memory.used),
        utilization_percent=None if utilization is None else int(utilization.gpu),
        temperature_celsius=_optional(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
        power_watts=None if power_mw is None else power_mw / 1000.0,
        power_limit_watts=None if limit_mw is None else limit_mw / 1000.0,
        pcie_generation=_optional(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        pcie_width=_optional(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        pcie_max_generation=_optional(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        pcie_max_width=_optional(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
    )
