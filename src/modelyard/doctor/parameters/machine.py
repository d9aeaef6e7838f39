"""Checks of what a start needs from the machine: shared memory, driver, GPU architecture, port.

Ids: ``host.shared-memory-small`` (NCCL's buffers do not fit in /dev/shm), ``host.driver-too-old``
(in a described host; this host's driver is checked by ``host.check_driver``),
and ``host.gpu-architecture-unsupported`` (no kernels of this engine build for the GPU); the
ports are ``ports.py``'s. They need ``ParameterContext.host`` (``doctor.host_facts.HostFacts``).
"""

from __future__ import annotations

from modelyard.doctor.drivers import any_release_driver_findings, driver_findings, engine_cuda_version
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.gpu_models import compute_capability
from modelyard.doctor.parameters.context import ParameterContext
from modelyard.doctor.parameters.layout import context_layout

GIB = 1 << 30
# NCCL keeps a shared-memory segment per peer and channel (7 MiB each, "Error while creating
# shared memory segment /dev/shm/nccl-... (size 7340384)"); Docker's default 64 MiB runs out.
MIN_SHM_BYTES = GIB
# Engines' CUDA builds carry kernels from these compute capabilities up (vLLM: 7.0; SGLang: 7.5).
MIN_CAPABILITY = {"vllm": (7, 0), "sglang": (7, 5)}
# Blackwell boards (compute capability 10.x and 12.x) need CUDA 12.8 builds.
BLACKWELL_CUDA = (12, 8)


def check_machine(context: ParameterContext) -> list[Finding]:
    if context.engine not in MIN_CAPABILITY:
        return []
    findings = _shared_memory(context)
    findings.extend(_driver(context))
    findings.extend(_architecture(context))
    return findings


def _shared_memory(context: ParameterContext) -> list[Finding]:
    host = context.host
    if host is None or host.shm_bytes is None or host.shm_bytes >= MIN_SHM_BYTES:
        return []
    ranks = context_layout(context).gpus_needed
    if ranks < 2:
        return []
    where = "the container's" if host.in_container else "this host's"
    return [
        Finding(
            "host.shared-memory-small",
            Severity.ERROR,
            f"{where} /dev/shm holds {host.shm_bytes / (1 << 20):.0f} MiB, too little for NCCL between the "
            f'{ranks} GPUs of one replica: it fails with "unhandled system error" / "Error while creating '
            'shared memory segment /dev/shm/nccl-..."',
            fix="run the container with --ipc=host (or --shm-size 16g); on a host, grow the /dev/shm tmpfs",
            details={"shm_bytes": host.shm_bytes, "ranks": ranks},
        )
    ]


def _driver(context: ParameterContext) -> list[Finding]:
    host = context.host
    if host is None or host.driver_version is None:
        return []
    if not context.version:
        return any_release_driver_findings(context.engine, host.driver_version)
    names = [gpu.name for gpu in context.gpus or []]
    return driver_findings(
        context.engine, context.version, host.driver_version, names, in_container=host.in_container
    )


def _cuda_tuple(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def _architecture(context: ParameterContext) -> list[Finding]:
    for gpu in context.gpus or []:
        capability = compute_capability(gpu.name)
        if capability is None:
            continue
        minimum = MIN_CAPABILITY[context.engine]
        if capability < minimum:
            return [
                Finding(
                    "host.gpu-architecture-unsupported",
                    Severity.ERROR,
                    f"{gpu.name} (compute capability {capability[0]}.{capability[1]}) is older than "
                    f"{context.label} supports ({minimum[0]}.{minimum[1]} and newer): its kernels are not "
                    "built for it",
                    fix="use a newer GPU, or the transformers backend",
                    details={"gpu": gpu.name, "compute_capability": f"{capability[0]}.{capability[1]}"},
                )
            ]
        cuda = _cuda_tuple(engine_cuda_version(context.engine, context.version))
        if capability[0] >= 10 and cuda is not None and cuda < BLACKWELL_CUDA:
            return [
                Finding(
                    "host.gpu-architecture-unsupported",
                    Severity.ERROR,
                    f"{gpu.name} (compute capability {capability[0]}.{capability[1]}) needs a CUDA 12.8 "
                    "build; "
                    f'{context.label} is built for CUDA {".".join(map(str, cuda))}, so it stops with "CUDA '
                    'error: no kernel image is available for execution on the device"',
                    fix="deploy an engine version built for CUDA 12.8 or newer (vLLM 0.9+, SGLang 0.5+)",
                    details={"gpu": gpu.name, "cuda_version": ".".join(map(str, cuda))},
                )
            ]
    return []
