"""Host checks: can this machine run this engine version with this model, before it starts?

Each check returns findings with stable ids (``host.*``, documented in ``docs/doctor/host.md``):
the NVIDIA driver against the engine's CUDA build (``drivers.py``), NVML and the CUDA devices, the PCIe
links and peer-to-peer access inside a tensor-parallel group, Docker and the NVIDIA container runtime when
the engine runs in a container (and the model path inside a mounted volume), host RAM against
the model size, free disk, the port, and the model directory's permissions.

The facts come from ``host_sources`` (NVML, Docker, the OS), passed in so that tests can
describe a GPU host without having one.

Usage::

    request = HostCheckRequest(backend_family="vllm", backend_version="0.25.0",
                               tensor_parallel_size=2, model_path=Path("/models/q"), port=8001)
    for finding in check_host(request):
        print(finding.severity, finding.check_id, finding.message)
"""

from __future__ import annotations

import itertools
import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelyard.doctor.drivers import driver_findings
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.host_sources import (
    DockerCliSource,
    DockerInfo,
    DockerSource,
    GpuSource,
    LocalSystemSource,
    NvmlGpuSource,
    SystemSource,
    current_user_ids,
    readable_by,
)
from modelyard.hardware.gpus import GpuInfo, GpuInventory

GIB = 1024**3
DISK_WARNING_BYTES = 10 * GIB
DISK_ERROR_BYTES = 2 * GIB


@dataclass(frozen=True)
class HostCheckRequest:
    """What is about to run here. Every field is optional; checks without their input are skipped."""

    backend_family: str | None = None
    backend_version: str | None = None
    # The CUDA build of the engine, when the backend version says it (else read from the table).
    cuda_version: str | None = None
    needs_gpu: bool = True
    # The GPUs the instance will use (NVML indices); None: the first tensor_parallel_size GPUs.
    gpu_indices: tuple[int, ...] | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    speculative_decoding: bool = False
    runs_in_container: bool = False
    # Container volumes, host path -> container path.
    volume_mounts: Mapping[str, str] = field(default_factory=dict)
    model_path: Path | None = None
    model_size_bytes: int | None = None
    data_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    # The user the engine runs as (None: the user running modelyard).
    engine_user: str | None = None
    # CUDA_VISIBLE_DEVICES as the engine will see it (None: unset).
    cuda_visible_devices: str | None = None

    @property
    def gpu_count(self) -> int:
        return max(1, self.tensor_parallel_size) * max(1, self.pipeline_parallel_size)


def _finding(check_id: str, severity: Severity, message: str, fix: str = "", **details: Any) -> Finding:
    return Finding(check_id=check_id, severity=severity, message=message, fix=fix, details=details)


def check_host(
    request: HostCheckRequest,
    *,
    gpus: GpuSource | None = None,
    docker: DockerSource | None = None,
    system: SystemSource | None = None,
) -> list[Finding]:
    """Every host finding for ``request``, errors first. Never raises for what it finds."""
    gpus = gpus or NvmlGpuSource()
    system = system or LocalSystemSource()
    findings: list[Finding] = []
    if request.needs_gpu:
        inventory = gpus.read_inventory()
        findings.extend(check_gpus_visible(request, inventory))
        findings.extend(check_driver(request, inventory))
        findings.extend(check_gpu_links(request, inventory, gpus))
    if request.runs_in_container:
        findings.extend(check_docker(request, (docker or DockerCliSource()).read_info()))
    findings.extend(check_memory(request, system))
    findings.extend(check_disk(request, system))
    findings.extend(check_port(request, system))
    findings.extend(check_model_permissions(request))
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return sorted(findings, key=lambda finding: order[finding.severity])


def check_gpus_visible(request: HostCheckRequest, inventory: GpuInventory) -> list[Finding]:
    if not inventory.gpus:
        reason = inventory.unavailable_reason or "NVML sees no GPU"
        check_id = "host.no-gpus" if reason == "NVML sees no GPUs" else "host.nvml-unavailable"
        return [
            _finding(
                check_id,
                Severity.ERROR,
                f"{request.backend_family or 'the engine'} needs a GPU, but none is usable: {reason}",
                "install the NVIDIA driver (nvidia-smi must work), or choose a CPU backend such as "
                "transformers; in a container, start it with the NVIDIA runtime",
            )
        ]
    findings: list[Finding] = []
    known = {str(gpu.index) for gpu in inventory.gpus} | {gpu.uuid for gpu in inventory.gpus}
    visible = request.cuda_visible_devices
    visible_count = len(inventory.gpus)
    if visible is not None:
        entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
        unknown = [
            entry for entry in entries if entry not in known and not entry.startswith(("GPU-", "MIG-"))
        ]
        if not entries or entries[0] in ("-1", "none", "NoDevFiles"):
            unknown = entries or ["(empty)"]
        if unknown:
            findings.append(
                _finding(
                    "host.cuda-devices-hidden",
                    Severity.ERROR,
                    f"CUDA_VISIBLE_DEVICES={visible!r} names devices this host does not have "
                    f"({', '.join(unknown)}); it has {len(inventory.gpus)} GPU(s)",
                    "unset CUDA_VISIBLE_DEVICES in the deployment's env and let modelyard place the GPUs, "
                    f"or list indices 0-{len(inventory.gpus) - 1}",
                )
            )
            return findings
        visible_count = len(entries)
    if request.gpu_indices is not None:
        absent = [index for index in request.gpu_indices if str(index) not in known]
        if absent:
            findings.append(
                _finding(
                    "host.gpus-missing",
                    Severity.ERROR,
                    f"GPU(s) {absent} are not on this host (it has {len(inventory.gpus)})",
                    "choose GPUs that `modelyard doctor` lists, or let the scheduler place the deployment",
                )
            )
    if request.gpu_count > visible_count:
        findings.append(
            _finding(
                "host.gpus-missing",
                Severity.ERROR,
                f"the deployment needs {request.gpu_count} GPU(s) (tensor x pipeline parallel), the host "
                f"shows {visible_count}",
                f"lower --tensor-parallel-size / --pipeline-parallel-size to fit {visible_count} GPU(s), or "
                "run on a host with more GPUs",
            )
        )
    return findings


def check_driver(request: HostCheckRequest, inventory: GpuInventory) -> list[Finding]:
    if not inventory.gpus:
        return []
    return driver_findings(
        request.backend_family,
        request.backend_version,
        inventory.driver_version,
        [gpu.name for gpu in inventory.gpus],
        in_container=request.runs_in_container,
        cuda_version=request.cuda_version,
    )


def _group(request: HostCheckRequest, inventory: GpuInventory) -> list[GpuInfo]:
    by_index = {gpu.index: gpu for gpu in inventory.gpus}
    if request.gpu_indices is not None:
        return [by_index[index] for index in request.gpu_indices if index in by_index]
    return inventory.gpus[: request.tensor_parallel_size]


def check_gpu_links(request: HostCheckRequest, inventory: GpuInventory, gpus: GpuSource) -> list[Finding]:
    group = _group(request, inventory)
    findings: list[Finding] = []
    for gpu in group:
        if (
            gpu.pcie_width is not None
            and gpu.pcie_max_width is not None
            and gpu.pcie_width < gpu.pcie_max_width
        ):
            findings.append(
                _finding(
                    "host.pcie-link-degraded",
                    Severity.WARNING,
                    f"GPU {gpu.index} ({gpu.name}) runs its PCIe link at "
                    f"x{gpu.pcie_width} of x{gpu.pcie_max_width}",
                    "reseat the card or move it to a full-width slot; check risers and BIOS lane settings",
                    gpu_index=gpu.index,
                )
            )
    if request.tensor_parallel_size < 2 or len(group) < 2:
        return findings
    if all(gpus.has_active_nvlink(gpu.index) for gpu in group):
        return findings
    narrow = [
        gpu
        for gpu in group
        if (gpu.pcie_max_width is not None and gpu.pcie_max_width < 16)
        or (gpu.pcie_max_generation is not None and gpu.pcie_max_generation < 4)
    ]
    if narrow:
        links = ", ".join(
            f"GPU {gpu.index} gen{gpu.pcie_max_generation or '?'} x{gpu.pcie_max_width or '?'}"
            for gpu in narrow
        )
        speculative = (
            " and speculative decoding adds a draft step per token over the same link"
            if request.speculative_decoding
            else ""
        )
        findings.append(
            _finding(
                "host.pcie-narrow-link",
                Severity.WARNING,
                f"tensor parallelism over {len(group)} GPUs without NVLink runs every layer's all-reduce "
                f"over narrow PCIe ({links}){speculative}",
                "prefer fewer GPUs with --pipeline-parallel-size, or GPUs in x16 gen4+ slots; measure with "
                "`modelyard bench` before relying on it",
            )
        )
    for first, second in itertools.combinations(group, 2):
        status = gpus.peer_to_peer_status(first.index, second.index)
        if status == "unsupported":
            severity = Severity.WARNING
            findings.append(
                _finding(
                    "host.p2p-unavailable",
                    severity,
                    f"GPUs {first.index} and {second.index} cannot access each other's memory peer to peer; "
                    "NCCL falls back to copies through host memory"
                    + (" (slow for speculative decoding)" if request.speculative_decoding else ""),
                    "check IOMMU/ACS settings in the BIOS and kernel (iommu=pt), use GPUs under one PCIe "
                    "switch or NVLink; if NCCL hangs, set NCCL_P2P_DISABLE=1",
                    gpu_indices=[first.index, second.index],
                )
            )
    return findings


def check_docker(request: HostCheckRequest, info: DockerInfo) -> list[Finding]:
    if not info.available:
        return [
            _finding(
                "host.docker-unavailable",
                Severity.ERROR,
                "this backend version runs as a container, but Docker is not usable: "
                f"{info.unavailable_reason}",
                "install Docker and start its daemon (the user running modelyard must be allowed to use it), "
                "or choose a backend version that runs as a process",
            )
        ]
    findings: list[Finding] = []
    if request.needs_gpu and "nvidia" not in info.runtimes and not info.cdi_spec_dirs:
        findings.append(
            _finding(
                "host.nvidia-runtime-missing",
                Severity.ERROR,
                f"Docker has no NVIDIA runtime (runtimes: {', '.join(info.runtimes) or 'none'}): containers "
                "will not see the GPUs",
                "install the NVIDIA Container Toolkit, run "
                "`nvidia-ctk runtime configure --runtime=docker`, then restart dockerd",
                runtimes=list(info.runtimes),
            )
        )
    if request.model_path is not None:
        findings.extend(_check_model_mounted(request))
    return findings


def _check_model_mounted(request: HostCheckRequest) -> list[Finding]:
    """The model path (as the host sees it, or already as the container sees it) must be in a volume."""
    assert request.model_path is not None
    model_path = request.model_path
    resolved = model_path.resolve(strict=False)
    for host_path, container_path in request.volume_mounts.items():
        host = Path(host_path).resolve(strict=False)
        if resolved == host or host in resolved.parents:
            return []
        container = Path(container_path)
        if model_path == container or container in model_path.parents:
            return []
    mounts = ", ".join(f"{h}:{c}" for h, c in request.volume_mounts.items()) or "none"
    return [
        _finding(
            "host.model-path-not-mounted",
            Severity.ERROR,
            f"the model path {model_path} is not inside any volume mounted into the container "
            f"(mounts: {mounts}); the engine will not find it",
            f"mount the model's folder, e.g. -v {model_path.parent}:/models:ro, and give the engine the path "
            f"as the container sees it (/models/{model_path.name})",
        )
    ]


def check_memory(request: HostCheckRequest, system: SystemSource) -> list[Finding]:
    if not request.model_size_bytes:
        return []
    available = system.available_memory_bytes()
    if available >= request.model_size_bytes:
        return []
    return [
        _finding(
            "host.ram-low",
            Severity.ERROR,
            f"the host has {available / GIB:.1f} GiB of RAM available, less than the model's "
            f"{request.model_size_bytes / GIB:.1f} GiB of weights: the OOM killer can kill the loader",
            "free RAM (stop other services), add swap, or load on a host with more memory",
            available_bytes=available,
            model_size_bytes=request.model_size_bytes,
        )
    ]


def check_disk(request: HostCheckRequest, system: SystemSource) -> list[Finding]:
    if request.data_dir is None:
        return []
    free = system.free_disk_bytes(request.data_dir)
    if free >= DISK_WARNING_BYTES:
        return []
    severity = Severity.ERROR if free < DISK_ERROR_BYTES else Severity.WARNING
    return [
        _finding(
            "host.disk-low",
            severity,
            f"only {free / GIB:.1f} GiB free under {request.data_dir}: engine logs and compile caches "
            "(torch.compile, Triton, CUDA graphs) need several GiB",
            "free disk space there, or move the data directory (--data-dir) to a larger disk",
            free_bytes=free,
        )
    ]


def check_port(request: HostCheckRequest, system: SystemSource) -> list[Finding]:
    if request.port is None or not system.port_in_use(request.host, request.port):
        return []
    return [
        _finding(
            "host.port-in-use",
            Severity.ERROR,
            f"port {request.port} on {request.host} is already in use: the engine could not listen there",
            f"stop the process holding it (`ss -ltnp 'sport = :{request.port}'`) or choose another port",
            port=request.port,
        )
    ]


def _engine_user_ids(user: str | None) -> tuple[str, int, set[int]] | None:
    if user is None:
        uid, groups = current_user_ids()
        return (str(uid), uid, groups)
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    groups = {entry.pw_gid} | set(os.getgrouplist(user, entry.pw_gid))
    return (user, entry.pw_uid, groups)


def check_model_permissions(request: HostCheckRequest) -> list[Finding]:
    path = request.model_path
    if path is None or not path.exists() or request.runs_in_container:
        return []
    ids = _engine_user_ids(request.engine_user)
    if ids is None:
        return [
            _finding(
                "host.model-unreadable",
                Severity.ERROR,
                f"the engine user {request.engine_user!r} does not exist on this host",
                "create the user or run the engine as an existing one",
            )
        ]
    name, uid, groups = ids
    # Every folder above must let the user pass (x); the model folder and its files must be readable.
    above = [parent for parent in path.parents if not readable_by(parent, uid, groups, need_read=False)]
    inside = [path, *(p for p in path.iterdir() if p.is_file())] if path.is_dir() else [path]
    blocked = above + [p for p in inside if not readable_by(p, uid, groups)]
    if not blocked:
        return []
    shown = ", ".join(str(p) for p in blocked[:5])
    return [
        _finding(
            "host.model-unreadable",
            Severity.ERROR,
            f"the engine user ({name}) cannot read {len(blocked)} path(s) of the model: {shown}",
            f"grant read access, e.g. `chmod -R a+rX {path}`, or run the engine as the files' owner",
            paths=[str(p) for p in blocked],
        )
    ]
