"""NVML DOUBLE: the part of nvidia-ml-py's ``pynvml`` that modelyard reads, answered from a file.

Tests of clusters have no GPUs, so each simulated Ray node is started with this folder first on
its ``PYTHONPATH`` and ``MODELYARD_NVML_DOUBLE`` naming a JSON file of that node's GPUs; the
code under test (``hardware/gpus.py``, run by the NVML probe task on the node) imports
``pynvml`` as usual and gets this module. It reproduces the real library's observable behaviour
for those calls: ``nvmlInit`` raises ``NVMLError`` without a driver (no file), names and UUIDs
are ``str`` (nvidia-ml-py 12+), memory is in bytes, power in milliwatts, unsupported fields
raise ``NVMLError``. The file is read at every ``nvmlInit``, so a test changes a node's GPUs by
rewriting it. Its shape::

    {"driver_version": "580.95.05", "cuda_driver_version": 13000,
     "gpus": [{"name": "NVIDIA L40S", "uuid": "GPU-...", "memory_total_bytes": 48318382080,
               "memory_used_bytes": 0, "utilization_percent": 3, "temperature_celsius": 41}]}

Optional per GPU: ``power_milliwatts``, ``power_limit_milliwatts``, ``pcie_generation``,
``pcie_width``, ``nvlink_links`` (one ``true``/``false`` per link, as NVLink boards report their
links' states; without it the board has no NVLink and NVML answers "Not Supported"). Peer-to-peer
reads between two GPUs are supported when both have an active NVLink, otherwise NVML's
``NVML_P2P_STATUS_NOT_SUPPORTED``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

DOUBLE_FILE_VARIABLE = "MODELYARD_NVML_DOUBLE"
NVML_TEMPERATURE_GPU = 0
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
# A one-element tuple, as nvidia-ml-py defines it.
NVML_P2P_CAPS_INDEX_READ = (0,)
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5
_state: dict[str, Any] = {}


class NVMLError(Exception):
    def __init__(self, value: str = "Uninitialized") -> None:
        super().__init__(value)
        self.value = value


@dataclass(frozen=True)
class _Memory:
    total: int
    free: int
    used: int


@dataclass(frozen=True)
class _Utilization:
    gpu: int
    memory: int


def nvmlInit() -> None:
    path = os.environ.get(DOUBLE_FILE_VARIABLE)
    if not path or not os.path.exists(path):
        raise NVMLError("NVML Shared Library Not Found")
    with open(path) as handle:
        _state.clear()
        _state.update(json.load(handle))


def nvmlShutdown() -> None:
    _state.clear()


def _gpus() -> list[dict[str, Any]]:
    if not _state:
        raise NVMLError("Uninitialized")
    gpus: list[dict[str, Any]] = _state.get("gpus", [])
    return gpus


def nvmlSystemGetDriverVersion() -> str:
    _gpus()
    return str(_state.get("driver_version", "580.95.05"))


def nvmlSystemGetCudaDriverVersion_v2() -> int:
    _gpus()
    return int(_state.get("cuda_driver_version", 13000))


def nvmlDeviceGetCount() -> int:
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(index: int) -> dict[str, Any]:
    gpus = _gpus()
    if not 0 <= index < len(gpus):
        raise NVMLError("Invalid Argument")
    return gpus[index]


def _field(handle: dict[str, Any], name: str) -> Any:
    if handle.get(name) is None:
        raise NVMLError("Not Supported")
    return handle[name]


def nvmlDeviceGetMemoryInfo(handle: dict[str, Any]) -> _Memory:
    total = int(handle["memory_total_bytes"])
    used = int(handle.get("memory_used_bytes", 0))
    return _Memory(total=total, free=total - used, used=used)


def nvmlDeviceGetUtilizationRates(handle: dict[str, Any]) -> _Utilization:
    return _Utilization(gpu=int(_field(handle, "utilization_percent")), memory=0)


def nvmlDeviceGetName(handle: dict[str, Any]) -> str:
    return str(handle["name"])


def nvmlDeviceGetUUID(handle: dict[str, Any]) -> str:
    return str(handle["uuid"])


def nvmlDeviceGetTemperature(handle: dict[str, Any], sensor: int) -> int:
    return int(_field(handle, "temperature_celsius"))


def nvmlDeviceGetPowerUsage(handle: dict[str, Any]) -> int:
    return int(_field(handle, "power_milliwatts"))


def nvmlDeviceGetEnforcedPowerLimit(handle: dict[str, Any]) -> int:
    return int(_field(handle, "power_limit_milliwatts"))


def nvmlDeviceGetCurrPcieLinkGeneration(handle: dict[str, Any]) -> int:
    return int(_field(handle, "pcie_generation"))


def nvmlDeviceGetCurrPcieLinkWidth(handle: dict[str, Any]) -> int:
    return int(_field(handle, "pcie_width"))


def nvmlDeviceGetMaxPcieLinkGeneration(handle: dict[str, Any]) -> int:
    return int(_field(handle, "pcie_generation"))


def nvmlDeviceGetMaxPcieLinkWidth(handle: dict[str, Any]) -> int:
    return int(_field(handle, "pcie_width"))


def nvmlDeviceGetNvLinkState(handle: dict[str, Any], link: int) -> int:
    links: list[bool] = _field(handle, "nvlink_links")
    if not 0 <= link < len(links):
        raise NVMLError("Invalid Argument")
    return NVML_FEATURE_ENABLED if links[link] else NVML_FEATURE_DISABLED


def _has_active_nvlink(handle: dict[str, Any]) -> bool:
    return any(handle.get("nvlink_links") or [])


def nvmlDeviceGetP2PStatus(first: dict[str, Any], second: dict[str, Any], capability: int) -> int:
    _gpus()
    if _has_active_nvlink(first) and _has_active_nvlink(second):
        return NVML_P2P_STATUS_OK
    return NVML_P2P_STATUS_NOT_SUPPORTED
