"""Where host checks read their facts: NVML, Docker, and the operating system.

``modelyard.doctor.host`` asks these small interfaces instead of calling NVML, ``docker`` or
psutil itself, so that tests feed it the description of a GPU host (there is no GPU where the
tests run). Each interface has one real implementation here; test doubles implement the same
protocol and are named as doubles.

Usage::

    gpus = NvmlGpuSource()
    inventory = gpus.read_inventory()
    gpus.peer_to_peer_status(0, 1)  # "ok", "unsupported" or "unknown"
"""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import psutil

from modelyard.hardware.gpus import GpuInventory, read_gpu_inventory

logger = logging.getLogger(__name__)

PeerToPeerStatus = Literal["ok", "unsupported", "unknown"]

_DOCKER_INFO_TIMEOUT_SECONDS = 10.0


class GpuSource(Protocol):
    """The GPUs of the host, as NVML reports them."""

    def read_inventory(self) -> GpuInventory:
        """Every GPU with its memory and PCIe link; an empty inventory with a reason without NVML."""

    def peer_to_peer_status(self, first_index: int, second_index: int) -> PeerToPeerStatus:
        """Whether the first GPU can read the second's memory directly (NVML P2P read capability)."""

    def has_active_nvlink(self, index: int) -> bool:
        """Whether the GPU has at least one active NVLink (then PCIe width does not limit TP)."""


@dataclass(frozen=True)
class DockerInfo:
    """What ``docker info`` says, or why it could not be asked."""

    available: bool
    unavailable_reason: str | None = None
    runtimes: tuple[str, ...] = ()
    default_runtime: str | None = None
    cdi_spec_dirs: tuple[str, ...] = ()


class DockerSource(Protocol):
    def read_info(self) -> DockerInfo:
        """The Docker daemon's facts (``docker info``), never raising."""


class SystemSource(Protocol):
    """Memory, disk, ports and file permissions of the host."""

    def available_memory_bytes(self) -> int: ...

    def free_disk_bytes(self, path: Path) -> int: ...

    def port_in_use(self, host: str, port: int) -> bool: ...


@dataclass
class NvmlGpuSource:
    """The real GPUs, through ``modelyard.hardware`` and nvidia-ml-py."""

    read: Callable[[], GpuInventory] = read_gpu_inventory
    _pynvml: Any = field(default=None, init=False, repr=False)

    def read_inventory(self) -> GpuInventory:
        return self.read()

    def _with_nvml(self, call: Callable[[Any], Any]) -> Any:
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:
            return None
        try:
            return call(pynvml)
        except (pynvml.NVMLError, ctypes.ArgumentError) as error:
            logger.debug("NVML call failed: %s", error)
            return None
        finally:
            pynvml.nvmlShutdown()

    def peer_to_peer_status(self, first_index: int, second_index: int) -> PeerToPeerStatus:
        def read(pynvml: Any) -> PeerToPeerStatus:
            first = pynvml.nvmlDeviceGetHandleByIndex(first_index)
            second = pynvml.nvmlDeviceGetHandleByIndex(second_index)
            status = pynvml.nvmlDeviceGetP2PStatus(
                first, second, _int_constant(pynvml.NVML_P2P_CAPS_INDEX_READ)
            )
            return "ok" if status == _int_constant(pynvml.NVML_P2P_STATUS_OK) else "unsupported"

        result = self._with_nvml(read)
        return result if result in ("ok", "unsupported") else "unknown"

    def has_active_nvlink(self, index: int) -> bool:
        def read(pynvml: Any) -> bool:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for link in range(_int_constant(pynvml.NVML_NVLINK_MAX_LINKS)):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(handle, link) == _int_constant(
                        pynvml.NVML_FEATURE_ENABLED
                    ):
                        return True
                except pynvml.NVMLError:
                    return False
            return False

        return bool(self._with_nvml(read))


def _int_constant(value: Any) -> int:
    """An NVML constant as an int: nvidia-ml-py defines some as one-element tuples
    (``NVML_P2P_CAPS_INDEX_READ = 0,``), which ctypes refuses to pass."""
    return int(value[0]) if isinstance(value, tuple) else int(value)


class DockerCliSource:
    """Asks the ``docker`` CLI (``docker info --format '{{json .}}'``), bounded by a timeout."""

    def __init__(self, executable: str = "docker", timeout_seconds: float = _DOCKER_INFO_TIMEOUT_SECONDS):
        self.executable = executable
        self.timeout_seconds = timeout_seconds

    def read_info(self) -> DockerInfo:
        program = shutil.which(self.executable)
        if program is None:
            return DockerInfo(available=False, unavailable_reason=f"{self.executable!r} is not on PATH")
        try:
            completed = subprocess.run(
                [program, "info", "--format", "{{json .}}"],
                capture_output=True,
                text=True,
                timeout=self.timeout_seconds,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return DockerInfo(
                available=False,
                unavailable_reason=f"docker info did not answer in {self.timeout_seconds:g} s",
            )
        except OSError as error:
            return DockerInfo(available=False, unavailable_reason=f"docker could not run ({error.strerror})")
        if completed.returncode != 0:
            message = (completed.stderr or completed.stdout).strip().splitlines()
            reason = message[-1] if message else f"exit status {completed.returncode}"
            return DockerInfo(
                available=False, unavailable_reason=f"the Docker daemon is not reachable: {reason}"
            )
        return parse_docker_info(completed.stdout)


def parse_docker_info(text: str) -> DockerInfo:
    """``docker info --format '{{json .}}'`` output as ``DockerInfo``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return DockerInfo(available=False, unavailable_reason="docker info did not print JSON")
    if not isinstance(data, dict):
        return DockerInfo(available=False, unavailable_reason="docker info did not print a JSON object")
    server_errors = data.get("ServerErrors")
    if server_errors:
        return DockerInfo(available=False, unavailable_reason="; ".join(str(e) for e in server_errors))
    runtimes = data.get("Runtimes")
    cdi = data.get("CDISpecDirs")
    return DockerInfo(
        available=True,
        runtimes=tuple(sorted(runtimes)) if isinstance(runtimes, dict) else (),
        default_runtime=str(data["DefaultRuntime"]) if data.get("DefaultRuntime") else None,
        cdi_spec_dirs=tuple(str(path) for path in cdi) if isinstance(cdi, list) else (),
    )


class LocalSystemSource:
    """This host, through psutil, the file system and a test bind on the port."""

    def available_memory_bytes(self) -> int:
        return int(psutil.virtual_memory().available)

    def free_disk_bytes(self, path: Path) -> int:
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        return int(shutil.disk_usage(existing).free)

    def port_in_use(self, host: str, port: int) -> bool:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as error:
                return error.errno in (errno.EADDRINUSE, errno.EACCES)
        return False


def readable_by(path: Path, uid: int, group_ids: set[int], *, need_read: bool = True) -> bool:
    """Whether a user (``uid`` with ``group_ids``) may read ``path`` and, if a directory, enter it.

    With ``need_read=False`` only entering (the execute bit of a directory) is asked.
    """
    try:
        status = path.stat()
    except OSError:
        return False
    if uid == 0:
        return True
    if status.st_uid == uid:
        bits = (status.st_mode >> 6) & 7
    elif status.st_gid in group_ids:
        bits = (status.st_mode >> 3) & 7
    else:
        bits = status.st_mode & 7
    if need_read and not bits & 4:
        return False
    return not (path.is_dir() and not bits & 1)


def current_user_ids() -> tuple[int, set[int]]:
    return os.getuid(), set(os.getgroups()) | {os.getgid()}
