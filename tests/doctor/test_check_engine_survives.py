"""Settings the engine starts with are not errors: CUDA_VISIBLE_DEVICES set by hand to the GPUs the
layout uses, and vLLM's own default memory share on a small GPU."""

from __future__ import annotations

from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity


def _severities(
    check_id: str,
    parameters: str,
    *,
    gpus: str = "1xH100",
    env: dict[str, str] | None = None,
    version: str | None = "0.25.0",
    gpu_count: int | None = None,
) -> list[Severity]:
    findings = plan_findings(parameters, gpus=gpus, env=env, version=version, gpu_count=gpu_count)
    return [finding.severity for finding in of_id(findings, check_id)]


def test_visible_devices_set_to_the_layouts_gpus_is_a_warning() -> None:
    # The engine starts on GPUs 0-3 (users running vllm serve themselves set them so).
    found = _severities(
        "param.visible-devices-mismatch", "-tp 4", gpus="4xRTX5090", env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    )
    assert found == [Severity.WARNING]
    assert _severities(
        "param.visible-devices-mismatch", "-tp 2", gpus="", gpu_count=2, env={"CUDA_VISIBLE_DEVICES": "0,1"}
    ) == [Severity.WARNING]


def test_visible_devices_that_break_the_start_stay_errors() -> None:
    too_few = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert _severities("param.visible-devices-mismatch", "-tp 4", gpus="4xH100", env=too_few) == [
        Severity.ERROR
    ]
    # More GPUs listed than the replica is given: replicas given the same list share them.
    shared = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5"}
    assert _severities("param.visible-devices-mismatch", "-tp 2", gpus="2xL20", env=shared) == [
        Severity.ERROR
    ]


def test_vllms_default_share_on_an_8_gb_gpu_is_a_warning() -> None:
    # 0.92 of 8 GB leaves 0.64 GiB, under the 1 GiB of a large model's graphs; small models start.
    findings = plan_findings("", version=None, gpus="1xRTX3060Ti 8GB")
    (finding,) = of_id(findings, "memory.fraction-leaves-no-headroom")
    assert finding.severity is Severity.WARNING
    assert "default" in finding.message
    assert not [finding for finding in findings if finding.severity is Severity.ERROR]


def test_a_share_raised_above_the_default_stays_an_error() -> None:
    assert _severities(
        "memory.fraction-leaves-no-headroom", "--gpu-memory-utilization 0.98", version="0.25.0", gpus="1x24GB"
    ) == [Severity.ERROR]
    assert (
        _severities(
            "memory.fraction-leaves-no-headroom",
            "--gpu-memory-utilization 0.98 --enforce-eager",
            gpus="1x80GB",
        )
        == []
    )
