"""vLLM's float8 e4m3 KV cache against the GPU's attention kernels
(param.kv-cache-dtype-unsupported-by-gpu)."""

from __future__ import annotations

from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity


def _severities(parameters: str, gpus: str, version: str | None = "0.25.0", **env: str) -> list[Severity]:
    findings = plan_findings(parameters, version=version, gpus=gpus, env=env)
    return [finding.severity for finding in of_id(findings, "param.kv-cache-dtype-unsupported-by-gpu")]


def test_fp8_e4m3_on_volta_is_refused_with_e5m2_named() -> None:
    # 1Cat-vLLM#27: two V100s, --kv-cache-dtype fp8; Triton: "type fp8e4nv not supported".
    findings = plan_findings("-tp 2 --kv-cache-dtype fp8", version=None, gpus="2xV100")
    (finding,) = of_id(findings, "param.kv-cache-dtype-unsupported-by-gpu")
    assert finding.severity is Severity.ERROR
    assert "compute capability 7.0" in finding.message
    assert "fp8_e5m2" in finding.fix


def test_e5m2_auto_and_hopper_are_silent() -> None:
    assert _severities("-tp 2 --kv-cache-dtype fp8_e5m2", "2xV100") == []
    assert _severities("-tp 2 --kv-cache-dtype auto", "2xV100") == []
    assert _severities("--kv-cache-dtype fp8", "1xH100") == []
    assert _severities("--kv-cache-dtype fp8_e4m3", "1xL40S") == []  # 8.9: Triton compiles e4m3


def test_between_turing_and_ada_it_depends_on_the_backend() -> None:
    assert _severities("--kv-cache-dtype fp8", "1xA100") == [Severity.WARNING]


def test_the_v0_engine_converts_e4m3_itself() -> None:
    assert _severities("-tp 2 --kv-cache-dtype fp8", "2xV100", version="0.7.3") == []
    assert _severities("-tp 2 --kv-cache-dtype fp8", "2xV100", version="0.9.2", VLLM_USE_V1="0") == []
