"""The NVIDIA driver against the CUDA an engine version is built for (its wheels or its image).

An engine's wheels (or Docker image) are built for one CUDA; the driver must be new enough for it.
Pip wheels run from the CUDA major family's minimum driver (minor version compatibility); a
container's image also needs the toolkit's driver on consumer GPUs, because its
``NVIDIA_REQUIRE_CUDA`` is enforced and only data-center boards on long-term driver branches get
forward compatibility. Findings: ``host.driver-too-old`` (docs/doctor/host.md).

Usage::

    engine_cuda_version("vllm", "0.8.4")            # "12.4"
    driver_findings("vllm", "0.4.3", "535.171.04", ["NVIDIA GeForce RTX 4090"], in_container=True)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.gpu_models import is_datacenter


def _finding(check_id: str, severity: Severity, message: str, fix: str = "", **details: Any) -> Finding:
    return Finding(check_id=check_id, severity=severity, message=message, fix=fix, details=details)


@dataclass(frozen=True)
class CudaDriverRequirement:
    """The NVIDIA driver a CUDA build needs (Linux x86_64).

    ``minimum_driver``: the lowest driver of the CUDA major family (CUDA minor version
    compatibility); below it the engine cannot start. ``toolkit_driver``: the driver the toolkit
    release shipped with; between the two, most kernels run but PTX JIT compilation does not.
    Source: NVIDIA CUDA Toolkit release notes, table "CUDA Toolkit and Corresponding Driver
    Versions", and docs.nvidia.com/deploy/cuda-compatibility (minor version compatibility).
    """

    cuda_version: str
    minimum_driver: str
    toolkit_driver: str


CUDA_DRIVER_REQUIREMENTS: dict[str, CudaDriverRequirement] = {
    "12.1": CudaDriverRequirement("12.1", minimum_driver="525.60.13", toolkit_driver="530.30.02"),
    "12.4": CudaDriverRequirement("12.4", minimum_driver="525.60.13", toolkit_driver="550.54.14"),
    "12.6": CudaDriverRequirement("12.6", minimum_driver="525.60.13", toolkit_driver="560.28.03"),
    "12.8": CudaDriverRequirement("12.8", minimum_driver="525.60.13", toolkit_driver="570.26"),
    "12.9": CudaDriverRequirement("12.9", minimum_driver="525.60.13", toolkit_driver="575.51.03"),
    "13.0": CudaDriverRequirement("13.0", minimum_driver="580.65.06", toolkit_driver="580.65.06"),
}


@dataclass(frozen=True)
class EngineCudaBuild:
    """The CUDA build of an engine's PyPI wheels from ``since_version`` on (until the next entry)."""

    family: str
    since_version: str
    cuda_version: str
    source: str


# Read from each release's pinned torch (pip's metadata of the wheels on PyPI): torch 2.8-2.10
# default wheels depend on nvidia-cuda-runtime-cu12 12.8; torch 2.11 and 2.13 on cuda-toolkit 13.0.
# vLLM 0.11-0.19 pin torch 2.8-2.10, vLLM 0.20-0.26 torch 2.11; SGLang 0.5.9-0.5.10.post1 pin
# torch 2.9.1, SGLang 0.5.11-0.5.17 torch 2.11, 0.5.18-0.5.21 torch 2.13.
ENGINE_CUDA_BUILDS: tuple[EngineCudaBuild, ...] = (
    EngineCudaBuild("vllm", "0.2", "12.1", "vllm 0.2-0.6.3 wheels on torch 2.1-2.4 (CUDA 12.1 wheels)"),
    EngineCudaBuild("vllm", "0.6.4", "12.4", "vllm 0.6.4-0.8 pin torch 2.5-2.6 (CUDA 12.4 wheels)"),
    EngineCudaBuild("vllm", "0.9", "12.8", "vllm 0.9-0.10 pin torch 2.7 (vLLM's CUDA 12.8 wheels)"),
    EngineCudaBuild("vllm", "0.11", "12.8", "vllm 0.11-0.19 pin torch 2.8-2.10 (CUDA 12.8 wheels)"),
    EngineCudaBuild("vllm", "0.20", "13.0", "vllm 0.20-0.26 pin torch 2.11.0 (CUDA 13.0 wheels)"),
    EngineCudaBuild("sglang", "0.4.0", "12.4", "sglang 0.4.0 pins torch 2.5.1 (CUDA 12.4 wheels)"),
    EngineCudaBuild("sglang", "0.5.0", "12.8", "sglang 0.5.9-0.5.10.post1 pin torch 2.9.1 (CUDA 12.8)"),
    EngineCudaBuild("sglang", "0.5.11", "13.0", "sglang 0.5.11+ pin torch 2.11 / 2.13 (CUDA 13.0)"),
)


# The CUDA of the official images (vllm/vllm-openai, lmsysorg/sglang): their NVIDIA_REQUIRE_CUDA
# needs the toolkit's driver on consumer GPUs. vllm/vllm-openai v0.4.3 moved to CUDA 12.4
# (vllm-project/vllm#5635), v0.9 to 12.8, v0.20 to 13.0 like the wheels.
ENGINE_IMAGE_CUDA_BUILDS: tuple[EngineCudaBuild, ...] = (
    EngineCudaBuild("vllm", "0.2", "12.1", "vllm/vllm-openai before v0.4.3: CUDA 12.1"),
    EngineCudaBuild("vllm", "0.4.3", "12.4", "vllm/vllm-openai v0.4.3-v0.8: FROM nvidia/cuda 12.4"),
    EngineCudaBuild("vllm", "0.9", "12.8", "vllm/vllm-openai v0.9-v0.19: CUDA 12.8"),
    EngineCudaBuild("vllm", "0.20", "13.0", "vllm/vllm-openai v0.20+: CUDA 13.0"),
)
# NVIDIA's long-term driver branches, which the CUDA images' forward-compatibility rules accept on
# data-center GPUs (NVIDIA_REQUIRE_CUDA "brand=tesla,driver>=535,driver<536" and so on).
LTS_DRIVER_BRANCHES = frozenset({470, 525, 535, 550, 570, 580})


def _version_tuple(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.replace("-", ".").split("."):
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _build_cuda(builds: tuple[EngineCudaBuild, ...], family: str | None, version: str | None) -> str | None:
    if family is None or version is None:
        return None
    wanted = _version_tuple(version)
    candidates = [
        build for build in builds if build.family == family and _version_tuple(build.since_version) <= wanted
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda build: _version_tuple(build.since_version)).cuda_version


def engine_cuda_version(family: str | None, version: str | None) -> str | None:
    """The CUDA version an engine version's wheels are built for, when known."""
    return _build_cuda(ENGINE_CUDA_BUILDS, family, version)


def engine_image_cuda_version(family: str | None, version: str | None) -> str | None:
    """The CUDA of the engine's official Docker image for ``version`` (else of its wheels)."""
    return _build_cuda(ENGINE_IMAGE_CUDA_BUILDS, family, version) or engine_cuda_version(family, version)


def driver_findings(
    family: str | None,
    version: str | None,
    driver: str | None,
    gpu_names: list[str],
    *,
    in_container: bool = False,
    cuda_version: str | None = None,
) -> list[Finding]:
    """The NVIDIA driver against the CUDA of the engine's build: its wheels, or in a container its
    image, whose ``NVIDIA_REQUIRE_CUDA`` the container runtime enforces. Data-center boards can run a
    newer CUDA on an LTS driver branch (forward compatibility); consumer boards cannot."""
    cuda = cuda_version or (
        engine_image_cuda_version(family, version) if in_container else engine_cuda_version(family, version)
    )
    requirement = CUDA_DRIVER_REQUIREMENTS.get(cuda) if cuda else None
    if requirement is None:
        return []
    engine = f"{family} {version}".strip()
    where = "image" if in_container else "build"
    if driver is None:
        return [
            _finding(
                "host.driver-too-old",
                Severity.WARNING,
                f"the NVIDIA driver version could not be read; {engine} (CUDA {cuda}) needs "
                f">= {requirement.minimum_driver}",
                "check `nvidia-smi`",
            )
        ]
    installed = _version_tuple(driver)
    details = {"driver_version": driver, "cuda_version": cuda}
    if installed < _version_tuple(requirement.minimum_driver):
        return [
            _finding(
                "host.driver-too-old",
                Severity.ERROR,
                f"NVIDIA driver {driver} is too old for {engine}, built for CUDA {cuda}: it needs "
                f">= {requirement.minimum_driver}",
                f"upgrade the driver to {requirement.toolkit_driver} or newer, or pick an engine version "
                "built for an older CUDA",
                **details,
            )
        ]
    if installed >= _version_tuple(requirement.toolkit_driver):
        return []
    if in_container:
        consumer = [name for name in gpu_names if not is_datacenter(name)]
        branch = installed[0] if installed else 0
        if consumer or branch not in LTS_DRIVER_BRANCHES:
            reason = (
                f"{consumer[0]} is not a data-center GPU, so CUDA forward compatibility does not apply"
                if consumer
                else f"driver branch {branch} is not a long-term branch the image's forward "
                "compatibility covers"
            )
            return [
                _finding(
                    "host.driver-too-old",
                    Severity.ERROR,
                    f"NVIDIA driver {driver} predates the CUDA {cuda} of the {engine} image ({reason}): the "
                    "container does not start ('nvidia-container-cli: requirement error: unsatisfied "
                    f"condition: cuda>={cuda}') or CUDA fails with error 804, forward compatibility "
                    "attempted on non supported HW",
                    f"upgrade the host driver to {requirement.toolkit_driver} or newer, or use an older "
                    "image built for the driver's CUDA",
                    **details,
                )
            ]
    return [
        _finding(
            "host.driver-too-old",
            Severity.WARNING,
            f"NVIDIA driver {driver} runs {engine} (CUDA {cuda} {where}) only through CUDA minor version "
            f"compatibility; kernels compiled at run time (PTX JIT) can fail",
            f"upgrade the driver to {requirement.toolkit_driver} or newer",
            **details,
        )
    ]


# The oldest release each engine's flag tables know (vLLM 0.6.0, SGLang 0.4.0) is built for CUDA 12
# (vLLM 0.6.0 on torch 2.4 cu121, SGLang 0.4.0 on torch 2.5 cu124), and so is every later one.
OLDEST_CUDA_OF_ANY_RELEASE = {"vllm": "12.1", "sglang": "12.4"}


def any_release_driver_findings(family: str, driver: str) -> list[Finding]:
    """For a plan without an engine version: a driver below the CUDA 12 family's minimum fails
    whichever release runs (CUDA's minor version compatibility starts at the family's minimum)."""
    cuda = OLDEST_CUDA_OF_ANY_RELEASE.get(family)
    requirement = CUDA_DRIVER_REQUIREMENTS.get(cuda) if cuda else None
    if requirement is None or _version_tuple(driver) >= _version_tuple(requirement.minimum_driver):
        return []
    return [
        _finding(
            "host.driver-too-old",
            Severity.ERROR,
            f"NVIDIA driver {driver} is older than every {family} release supports: all are built for "
            f"CUDA {cuda} or newer, which needs >= {requirement.minimum_driver}; CUDA fails to "
            'initialise ("The NVIDIA driver on your system is too old")',
            f"upgrade the driver to {requirement.toolkit_driver} or newer",
            driver_version=driver,
            cuda_version=cuda,
        )
    ]
