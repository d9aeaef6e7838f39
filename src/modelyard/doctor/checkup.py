"""The checks ``modelyard doctor`` runs, put together: the host alone, or a planned deployment.

- ``host_overview``: this host as it is (GPUs, NVML, the driver against every engine CUDA build
  modelyard knows, PCIe links, Docker when installed, free disk).
- ``deployment_checkup``: a model directory with a backend version and its arguments: the model
  directory checks, doctor's parameter preflight (``modelyard.doctor.preflight``, when present)
  and the host checks for that engine (skipped when planning for other GPUs with ``gpu_specs``).

Both return findings, errors first; neither raises for what it finds.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from modelyard.backends.arguments import parse_env
from modelyard.backends.parameters import ParsedParameters
from modelyard.backends.spec import BackendSpec, BackendVersion
from modelyard.doctor.drivers import CUDA_DRIVER_REQUIREMENTS, ENGINE_CUDA_BUILDS
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.host import (
    HostCheckRequest,
    check_disk,
    check_driver,
    check_gpu_links,
    check_host,
)
from modelyard.doctor.host_sources import (
    DockerCliSource,
    DockerInfo,
    DockerSource,
    GpuSource,
    LocalSystemSource,
    NvmlGpuSource,
    SystemSource,
)
from modelyard.doctor.model_directory import check_model_directory
from modelyard.errors import InvalidInput
from modelyard.estimate.layout import Layout
from modelyard.hardware.gpus import GpuInfo, GpuInventory

logger = logging.getLogger(__name__)

# Engine families that cannot run without an NVIDIA GPU (transformers and custom engines may).
GPU_ONLY_FAMILIES = frozenset({"vllm", "sglang"})

_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then facts; the order within a severity is kept."""
    return sorted(findings, key=lambda finding: _ORDER[finding.severity])


def host_overview(
    *,
    data_dir: Path | None = None,
    gpus: GpuSource | None = None,
    docker: DockerSource | None = None,
    system: SystemSource | None = None,
) -> list[Finding]:
    """This host as it is: what can run here, and what would slow or stop an engine."""
    gpus = gpus or NvmlGpuSource()
    system = system or LocalSystemSource()
    inventory = gpus.read_inventory()
    findings: list[Finding] = []
    if not inventory.gpus:
        findings.append(
            Finding(
                "host.nvml-unavailable"
                if inventory.unavailable_reason != "NVML sees no GPUs"
                else "host.no-gpus",
                Severity.INFO,
                f"no usable NVIDIA GPU ({inventory.unavailable_reason}): only CPU backends such as "
                "transformers can run here",
                "install the NVIDIA driver to run vLLM or SGLang",
            )
        )
    else:
        names = ", ".join(f"{gpu.index}: {gpu.name}" for gpu in inventory.gpus)
        findings.append(
            Finding(
                "host.gpus",
                Severity.INFO,
                f"{len(inventory.gpus)} GPU(s) ({names}), driver {inventory.driver_version or 'unknown'}",
                details={"inventory": inventory.to_json()},
            )
        )
        for cuda_version in sorted(CUDA_DRIVER_REQUIREMENTS):
            engines = [
                f"{build.family} >= {build.since_version}"
                for build in ENGINE_CUDA_BUILDS
                if build.cuda_version == cuda_version
            ]
            request = HostCheckRequest(backend_family=" / ".join(engines), cuda_version=cuda_version)
            findings.extend(check_driver(request, inventory))
        all_gpus = HostCheckRequest(tensor_parallel_size=len(inventory.gpus))
        findings.extend(check_gpu_links(all_gpus, inventory, gpus))
    if docker is not None or shutil.which("docker") is not None:
        findings.extend(_docker_overview((docker or DockerCliSource()).read_info(), bool(inventory.gpus)))
    if data_dir is not None:
        findings.extend(check_disk(HostCheckRequest(data_dir=data_dir), system))
    return sort_findings(findings)


def _docker_overview(info: DockerInfo, has_gpus: bool) -> list[Finding]:
    """Docker is optional (only container backends need it): its problems are warnings here."""
    if not info.available:
        return [
            Finding(
                "host.docker-unavailable",
                Severity.WARNING,
                f"Docker is installed but not usable ({info.unavailable_reason}): container backends "
                "cannot run here; process backends can",
                "start the Docker daemon and let the user running modelyard use it",
            )
        ]
    if has_gpus and "nvidia" not in info.runtimes and not info.cdi_spec_dirs:
        return [
            Finding(
                "host.nvidia-runtime-missing",
                Severity.WARNING,
                f"Docker has no NVIDIA runtime (runtimes: {', '.join(info.runtimes) or 'none'}): containers "
                "will not see the GPUs",
                "install the NVIDIA Container Toolkit, run `nvidia-ctk runtime configure --runtime=docker`, "
                "then restart dockerd",
            )
        ]
    return []


def inventory_from_gpu_specs(gpu_specs: Sequence[Any]) -> GpuInventory:
    """An inventory for planned hardware (``--gpus 2x48GB``): totals only, all memory free."""
    gpus = [
        GpuInfo(
            index=index,
            uuid=f"PLANNED-{index}",
            name=str(spec.name),
            memory_total_bytes=int(spec.memory_total_bytes),
            memory_free_bytes=int(spec.memory_free_bytes or spec.memory_total_bytes),
            memory_used_bytes=0,
        )
        for index, spec in enumerate(gpu_specs)
    ]
    return GpuInventory(gpus=gpus)


def parallelism(
    family: str, version: str, parameters: str | list[str] | ParsedParameters, env: dict[str, str]
) -> tuple[Layout | None, bool]:
    """(layout, speculative decoding) as the arguments ask (lines as typed, or their parsed form,
    kept as it is); no layout for other engines. What the host checks take TP and PP from."""
    if family not in ("vllm", "sglang"):
        return None, False
    from modelyard.estimate.engine_arguments import parse_engine_arguments, parsed_parameters
    from modelyard.estimate.layout import read_layout

    try:
        lines = [parameters] if isinstance(parameters, str) else parameters
        parsed = parsed_parameters(family, lines, version)
        arguments = parse_engine_arguments(family, parsed)
    except InvalidInput as error:
        logger.debug("engine arguments not readable for host checks: %s", error)
        return None, False
    speculative = any(
        option.name.startswith(("--speculative-config", "--speculative-algorithm", "--speculative-algo"))
        for option in parsed.options
    )
    return read_layout(family, parsed, env), speculative or arguments.speculative_mtp


def preflight_available() -> bool:
    """Whether doctor's parameter checks (``modelyard.doctor.preflight``) are in this build."""
    import importlib.util

    return importlib.util.find_spec("modelyard.doctor.preflight") is not None


def deployment_checkup(
    *,
    model_dir: Path,
    spec: BackendSpec,
    version: BackendVersion,
    backend_parameters: str | list[str],
    env: str | list[str] | dict[str, str],
    deployment_name: str | None = None,
    gpu_specs: Sequence[Any] | None = None,
    gpu_ids: Sequence[int] | None = None,
    data_dir: Path | None = None,
    gpus: GpuSource | None = None,
    docker: DockerSource | None = None,
    system: SystemSource | None = None,
) -> list[Finding]:
    """Everything doctor can say about serving ``model_dir`` with this backend version and arguments.

    ``backend_parameters`` and ``env`` are passed as the user typed them (the parameter checks look
    for stray whitespace and broken lines). ``gpu_specs`` plans for other hardware (``--gpus
    2x48GB``): this host's checks are skipped and the preflight sees those GPUs instead.
    """
    gpus = gpus or NvmlGpuSource()
    try:
        environment = parse_env(env)
    except InvalidInput:
        environment = {}
    layout, speculative = parallelism(spec.family, version.version, backend_parameters, environment)
    count = layout.gpus_needed if layout is not None else 1
    pipeline_parallel = layout.pipeline_parallel if layout is not None else 1
    inventory = inventory_from_gpu_specs(gpu_specs) if gpu_specs else gpus.read_inventory()
    if gpu_ids:
        chosen = [gpu for gpu in inventory.gpus if gpu.index in set(gpu_ids)]
    else:
        chosen = inventory.gpus[:count]
    findings: list[Finding] = []
    if preflight_available():
        from modelyard.doctor.preflight import preflight_deployment

        findings.extend(
            preflight_deployment(
                deployment_name=deployment_name,
                model_dir=model_dir,
                engine=spec.family,
                version=version,
                backend_parameters=backend_parameters,
                env=env,
                gpus=chosen if len(chosen) >= count else None,
                gpu_count=count,
            )
        )
    else:
        logger.info("modelyard.doctor.preflight is not available: engine flags were not checked")
        findings.extend(check_model_directory(model_dir))
    if not gpu_specs:
        from modelyard.modeldir import inspect_model_directory

        report = inspect_model_directory(model_dir)
        request = HostCheckRequest(
            backend_family=spec.family,
            backend_version=version.version,
            needs_gpu=version.supports_gpu and spec.family in GPU_ONLY_FAMILIES,
            gpu_indices=tuple(gpu_ids) if gpu_ids else None,
            tensor_parallel_size=max(1, count // pipeline_parallel),
            pipeline_parallel_size=pipeline_parallel,
            speculative_decoding=speculative,
            runs_in_container=version.runs_in_container,
            model_path=model_dir,
            model_size_bytes=report.size_bytes or None,
            data_dir=data_dir,
            cuda_visible_devices=environment.get("CUDA_VISIBLE_DEVICES"),
        )
        findings.extend(check_host(request, gpus=gpus, docker=docker, system=system))
    return sort_findings(findings)
