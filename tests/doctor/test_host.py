"""Host checks against a described GPU host (doubles for NVML and RAM; real ports and files)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from modelyard.doctor.drivers import engine_cuda_version
from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.host import HostCheckRequest, check_host
from modelyard.doctor.host_sources import (
    DockerCliSource,
    DockerInfo,
    LocalSystemSource,
    PeerToPeerStatus,
    parse_docker_info,
)
from modelyard.hardware.gpus import GpuInfo, GpuInventory
from modelyard.testing.ports import reserved_port

GIB = 1024**3


def _gpu(index: int, *, width: int = 16, max_width: int = 16, generation: int = 4) -> GpuInfo:
    return GpuInfo(
        index=index,
        uuid=f"GPU-{index:04d}",
        name="NVIDIA GeForce RTX 4090",
        memory_total_bytes=48 * GIB,
        memory_free_bytes=47 * GIB,
        memory_used_bytes=1 * GIB,
        pcie_generation=generation,
        pcie_width=width,
        pcie_max_generation=generation,
        pcie_max_width=max_width,
    )


@dataclass
class GpuHostDouble:
    """A GPU host described in the test: NVML's answers without NVML (implements GpuSource)."""

    inventory: GpuInventory
    peer_to_peer: PeerToPeerStatus = "ok"
    nvlink: bool = False

    def read_inventory(self) -> GpuInventory:
        return self.inventory

    def peer_to_peer_status(self, first_index: int, second_index: int) -> PeerToPeerStatus:
        return self.peer_to_peer

    def has_active_nvlink(self, index: int) -> bool:
        return self.nvlink


@dataclass
class SystemDouble:
    """RAM and disk amounts described in the test; the port check is real (implements SystemSource)."""

    available_memory: int = 256 * GIB
    free_disk: int = 500 * GIB
    real: LocalSystemSource = field(default_factory=LocalSystemSource)

    def available_memory_bytes(self) -> int:
        return self.available_memory

    def free_disk_bytes(self, path: Path) -> int:
        return self.free_disk

    def port_in_use(self, host: str, port: int) -> bool:
        return self.real.port_in_use(host, port)


@dataclass
class DockerDouble:
    """``docker info`` answers without a Docker daemon (implements DockerSource)."""

    info: DockerInfo

    def read_info(self) -> DockerInfo:
        return self.info


def two_gpu_host(**changes: object) -> GpuHostDouble:
    inventory = GpuInventory(gpus=[_gpu(0), _gpu(1)], driver_version="580.95.05", cuda_driver_version="13.0")
    return replace(GpuHostDouble(inventory=inventory), **changes)  # type: ignore[arg-type]


DOCKER_INFO_WITH_NVIDIA = json.dumps(
    {
        "ServerVersion": "26.1.5",
        "DefaultRuntime": "runc",
        "Runtimes": {
            "io.containerd.runc.v2": {"path": "runc"},
            "nvidia": {"path": "nvidia-container-runtime"},
        },
        "CDISpecDirs": [],
    }
)


def _ids(findings: list[Finding]) -> list[str]:
    return [finding.check_id for finding in findings]


def _run(request: HostCheckRequest, **sources: object) -> list[Finding]:
    gpus = sources.get("gpus", two_gpu_host())
    system = sources.get("system", SystemDouble())
    docker = sources.get("docker", DockerDouble(parse_docker_info(DOCKER_INFO_WITH_NVIDIA)))
    return check_host(request, gpus=gpus, system=system, docker=docker)  # type: ignore[arg-type]


GOOD = HostCheckRequest(backend_family="vllm", backend_version="0.25.0", tensor_parallel_size=2)


def test_healthy_two_gpu_host_has_no_finding() -> None:
    assert _run(GOOD) == []


# -- GPUs and NVML --------------------------------------------------------------------------------


def test_no_nvml_is_an_error_for_a_gpu_engine() -> None:
    gpus = GpuHostDouble(GpuInventory(unavailable_reason="NVML not available: no NVIDIA driver on this host"))
    assert _ids(_run(GOOD, gpus=gpus)) == ["host.nvml-unavailable"]


def test_no_nvml_is_fine_for_a_cpu_engine() -> None:
    gpus = GpuHostDouble(GpuInventory(unavailable_reason="NVML not available"))
    request = HostCheckRequest(backend_family="transformers", needs_gpu=False)
    assert _run(request, gpus=gpus) == []


def test_nvml_without_gpus() -> None:
    gpus = GpuHostDouble(GpuInventory(driver_version="580.95.05", unavailable_reason="NVML sees no GPUs"))
    assert _ids(_run(GOOD, gpus=gpus)) == ["host.no-gpus"]


def test_cuda_visible_devices_naming_absent_gpus() -> None:
    findings = _run(replace(GOOD, cuda_visible_devices="2,3"))
    assert _ids(findings) == ["host.cuda-devices-hidden"]
    assert "'2,3'" in findings[0].message


def test_cuda_visible_devices_empty_hides_every_gpu() -> None:
    assert _ids(_run(replace(GOOD, cuda_visible_devices=""))) == ["host.cuda-devices-hidden"]


def test_cuda_visible_devices_listing_present_gpus_is_fine() -> None:
    assert _run(replace(GOOD, cuda_visible_devices="0,1")) == []


def test_more_gpus_asked_than_present() -> None:
    findings = _run(replace(GOOD, tensor_parallel_size=4))
    assert _ids(findings) == ["host.gpus-missing"]
    assert "needs 4 GPU(s)" in findings[0].message


# -- driver against the engine's CUDA build ---------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "version", "cuda"),
    [
        ("vllm", "0.19.1", "12.8"),
        ("vllm", "0.25.0", "13.0"),
        ("sglang", "0.5.10.post1", "12.8"),
        ("sglang", "0.5.11", "13.0"),
        ("sglang", "0.5.17", "13.0"),
        ("transformers", "5.24", None),
    ],
)
def test_engine_cuda_build_table(family: str, version: str, cuda: str | None) -> None:
    assert engine_cuda_version(family, version) == cuda


def test_driver_below_the_cuda13_family_is_an_error() -> None:
    gpus = two_gpu_host(inventory=GpuInventory(gpus=[_gpu(0), _gpu(1)], driver_version="570.172.08"))
    findings = _run(GOOD, gpus=gpus)
    assert _ids(findings) == ["host.driver-too-old"]
    assert findings[0].severity is Severity.ERROR
    assert ">= 580.65.06" in findings[0].message


def test_driver_in_minor_version_compatibility_is_a_warning() -> None:
    gpus = two_gpu_host(inventory=GpuInventory(gpus=[_gpu(0), _gpu(1)], driver_version="550.163.01"))
    request = replace(GOOD, backend_version="0.19.1")
    (finding,) = _run(request, gpus=gpus)
    assert finding.check_id == "host.driver-too-old"
    assert finding.severity is Severity.WARNING


def test_new_enough_driver_for_cuda12_engine_is_quiet() -> None:
    gpus = two_gpu_host(inventory=GpuInventory(gpus=[_gpu(0), _gpu(1)], driver_version="570.195.03"))
    assert _run(replace(GOOD, backend_version="0.19.1"), gpus=gpus) == []


# -- PCIe and peer to peer --------------------------------------------------------------------------


def test_degraded_pcie_link_width() -> None:
    gpus = two_gpu_host(
        inventory=GpuInventory(gpus=[_gpu(0), _gpu(1, width=4, max_width=16)], driver_version="580.95.05")
    )
    findings = _run(GOOD, gpus=gpus)
    assert _ids(findings) == ["host.pcie-link-degraded"]
    assert "x4 of x16" in findings[0].message


def test_tensor_parallel_over_narrow_pcie_warns() -> None:
    narrow = [_gpu(0, width=8, max_width=8, generation=3), _gpu(1, width=8, max_width=8, generation=3)]
    gpus = two_gpu_host(inventory=GpuInventory(gpus=narrow, driver_version="580.95.05"))
    findings = _run(replace(GOOD, speculative_decoding=True), gpus=gpus)
    assert _ids(findings) == ["host.pcie-narrow-link"]
    assert "speculative decoding" in findings[0].message


def test_narrow_pcie_with_nvlink_is_quiet() -> None:
    narrow = [_gpu(0, width=8, max_width=8), _gpu(1, width=8, max_width=8)]
    gpus = two_gpu_host(inventory=GpuInventory(gpus=narrow, driver_version="580.95.05"), nvlink=True)
    assert _run(GOOD, gpus=gpus) == []


def test_narrow_pcie_without_tensor_parallelism_is_quiet() -> None:
    narrow = [_gpu(0, width=8, max_width=8), _gpu(1, width=8, max_width=8)]
    gpus = two_gpu_host(inventory=GpuInventory(gpus=narrow, driver_version="580.95.05"))
    assert _run(replace(GOOD, tensor_parallel_size=1), gpus=gpus) == []


def test_gpus_without_peer_to_peer() -> None:
    findings = _run(GOOD, gpus=two_gpu_host(peer_to_peer="unsupported"))
    assert _ids(findings) == ["host.p2p-unavailable"]
    assert findings[0].details["gpu_indices"] == [0, 1]


# -- Docker ----------------------------------------------------------------------------------------


def test_container_backend_without_docker() -> None:
    docker = DockerCliSource(executable="docker-that-is-not-installed")
    findings = _run(replace(GOOD, runs_in_container=True), docker=docker)
    assert _ids(findings) == ["host.docker-unavailable"]
    assert "not on PATH" in findings[0].message


def test_docker_without_nvidia_runtime() -> None:
    info = parse_docker_info(json.dumps({"Runtimes": {"runc": {}, "io.containerd.runc.v2": {}}}))
    findings = _run(replace(GOOD, runs_in_container=True), docker=DockerDouble(info))
    assert _ids(findings) == ["host.nvidia-runtime-missing"]


def test_docker_with_cdi_specs_counts_as_gpu_capable() -> None:
    info = parse_docker_info(json.dumps({"Runtimes": {"runc": {}}, "CDISpecDirs": ["/etc/cdi"]}))
    assert _run(replace(GOOD, runs_in_container=True), docker=DockerDouble(info)) == []


def test_daemon_errors_make_docker_unavailable() -> None:
    info = parse_docker_info(json.dumps({"ServerErrors": ["Cannot connect to the Docker daemon"]}))
    assert not info.available


def test_model_path_outside_every_volume(tmp_path: Path) -> None:
    request = replace(
        GOOD,
        runs_in_container=True,
        model_path=tmp_path / "models" / "qwen",
        volume_mounts={"/data": "/data"},
    )
    findings = _run(request)
    assert _ids(findings) == ["host.model-path-not-mounted"]
    assert "-v " in findings[0].fix


def test_model_path_inside_a_volume_is_fine(tmp_path: Path) -> None:
    request = replace(
        GOOD,
        runs_in_container=True,
        model_path=tmp_path / "models" / "qwen",
        volume_mounts={str(tmp_path / "models"): "/models"},
    )
    assert _run(request) == []


# -- RAM, disk, port, permissions --------------------------------------------------------------------


def test_ram_smaller_than_the_model() -> None:
    request = replace(GOOD, model_size_bytes=54 * GIB)
    findings = _run(request, system=SystemDouble(available_memory=31 * GIB))
    assert _ids(findings) == ["host.ram-low"]
    assert "31.0 GiB" in findings[0].message
    assert _run(request, system=SystemDouble(available_memory=120 * GIB)) == []


@pytest.mark.parametrize(("free_gib", "severity"), [(1, Severity.ERROR), (5, Severity.WARNING), (50, None)])
def test_free_disk(tmp_path: Path, free_gib: int, severity: Severity | None) -> None:
    findings = _run(replace(GOOD, data_dir=tmp_path), system=SystemDouble(free_disk=free_gib * GIB))
    assert [f.severity for f in findings] == ([severity] if severity else [])


def test_real_free_disk_is_read(tmp_path: Path) -> None:
    assert LocalSystemSource().free_disk_bytes(tmp_path / "not" / "yet") > 0


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield int(server.getsockname()[1])


def test_port_in_use(listening_port: int) -> None:
    findings = _run(replace(GOOD, port=listening_port))
    assert _ids(findings) == ["host.port-in-use"]
    assert str(listening_port) in findings[0].fix


def test_free_port_is_quiet() -> None:
    assert _run(replace(GOOD, port=reserved_port())) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_model_file_unreadable_by_the_engine_user(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"x")
    (model / "model.safetensors").chmod(0o000)
    findings = _run(replace(GOOD, model_path=model))
    assert _ids(findings) == ["host.model-unreadable"]
    assert "model.safetensors" in findings[0].message


def test_model_unreadable_by_another_user(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "config.json").chmod(0o600)
    model.chmod(0o700)
    tmp_path.chmod(0o755)
    request = replace(GOOD, model_path=model, engine_user="nobody")
    findings = _run(request)
    if os.stat(model).st_uid == 65534:
        pytest.skip("the test runs as nobody")
    assert _ids(findings) == ["host.model-unreadable"]


def test_readable_model_is_quiet(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert _run(replace(GOOD, model_path=model)) == []


def test_unknown_engine_user() -> None:
    request = replace(GOOD, model_path=Path("/"), engine_user="no-such-user-modelyard")
    assert _ids(_run(request)) == ["host.model-unreadable"]


def test_nvml_constants_defined_as_tuples_are_unwrapped() -> None:
    # nvidia-ml-py defines NVML_P2P_CAPS_INDEX_READ as ``0,``; ctypes refuses the tuple (seen on an H200).
    from modelyard.doctor.host_sources import _int_constant

    assert _int_constant((0,)) == 0
    assert _int_constant(36) == 36
