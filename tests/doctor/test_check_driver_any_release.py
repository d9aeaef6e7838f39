"""The driver against the engine's CUDA build, for plans with and without a version (host.driver-too-old)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity
from modelyard.doctor.host_facts import HostFacts


def _driver(driver: str, version: str | None, engine: str = "vllm") -> list[Severity]:
    host = HostFacts(shm_bytes=64 << 30, driver_version=driver, hub_cache_dir=Path("/nonexistent"))
    findings = plan_findings("", engine=engine, version=version, host=host)
    return [f.severity for f in of_id(findings, "host.driver-too-old")]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_cuda_11_driver_fails_every_release(engine: str) -> None:
    assert _driver("470.182.03", None, engine) == [Severity.ERROR]
    assert _driver("535.161.08", None, engine) == []


def test_a_cuda_13_build_on_a_cuda_12_driver_is_an_error_not_a_warning() -> None:
    assert _driver("570.133.20", "0.20.0") == [Severity.ERROR]  # vLLM 0.20: torch 2.11, CUDA 13.0
    assert _driver("580.65.06", "0.20.0") == []


def test_minor_version_compatibility_starts_with_a_warning() -> None:
    assert _driver("535.161.08", "0.10.0") == [Severity.WARNING]  # CUDA 12.8 wheels on a 12.2 driver


def test_sglang_0_4_is_a_cuda_12_build() -> None:
    assert _driver("520.61.05", "0.4.6", engine="sglang") == [Severity.ERROR]
    assert _driver("550.54.14", "0.4.6", engine="sglang") == []
