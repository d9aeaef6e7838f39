"""preflight_deployment: the model directory, parameter and memory checks of one deployment."""

from __future__ import annotations

from pathlib import Path

from param_fixtures import gpu, make_model_dir

from modelyard.backends.spec import BackendSpec, BackendVersion
from modelyard.doctor.findings import Severity, has_errors
from modelyard.doctor.preflight import preflight_deployment


def _vllm_spec() -> BackendSpec:
    version = BackendVersion(version="0.25.0", executable="vllm", run_command="serve {{model_path}}")
    return BackendSpec(name="vllm", family="vllm", default_version="0.25.0", versions={"0.25.0": version})


def test_preflight_runs_model_parameter_and_memory_checks(tmp_path: Path) -> None:
    findings = preflight_deployment(
        deployment_name="qwen36",
        model_dir=make_model_dir(tmp_path),
        engine="vllm",
        version="0.25.0",
        backend_parameters=["--tensor-parallel-size 2", "--max-model-len 32768", "--tool-call-parser hermes"],
        env=["VLLM_LOGGING_LEVEL=INFO"],
        gpus=[gpu(0), gpu(1)],
    )
    areas = {finding.check_id.split(".")[0] for finding in findings}
    assert {"model", "param", "memory"} <= areas
    assert "param.tool-call-parser-mismatch" in [finding.check_id for finding in findings]
    assert has_errors(findings)


def test_preflight_of_a_clean_deployment_has_no_parameter_finding(tmp_path: Path) -> None:
    findings = preflight_deployment(
        deployment_name="qwen36",
        model_dir=make_model_dir(tmp_path),
        engine="vllm",
        version="0.25.0",
        backend_parameters="--tensor-parallel-size 2 --max-model-len 32768 --tool-call-parser qwen3_coder "
        "--enable-auto-tool-choice --reasoning-parser qwen3",
        env={},
        gpus=[gpu(0), gpu(1)],
    )
    assert [finding.check_id for finding in findings if finding.check_id.startswith("param.")] == []


def test_preflight_takes_the_backend_version_and_a_gpu_count(tmp_path: Path) -> None:
    # the deployment service passes the BackendVersion, the replica's GPUs and their number
    findings = preflight_deployment(
        deployment_name="qwen36",
        model_dir=str(make_model_dir(tmp_path)),
        engine="vllm",
        version=_vllm_spec().versions["0.25.0"],
        # 131,072 tokens: the model's 262,144 is 256,000 tokens too many for what CUDA sees of an
        # 80 GiB board (NVML's total less the driver's reservation, the view preflight now takes).
        backend_parameters="--max-model-len 131072 --speculative-config "
        '\'{"method": "mtp", "num_speculative_tokens": 2}\'',
        env="VLLM_LOGGING_LEVEL=INFO",
        gpus=[gpu(0)],
        gpu_count=2,
    )
    params = {
        finding.check_id: finding.severity for finding in findings if finding.check_id.startswith("param.")
    }
    assert params == {"param.tensor-parallel-size": Severity.WARNING}
    # the layout uses one GPU (the other sits idle), and the one known GPU holds the model
    assert not any(
        finding.check_id.startswith("memory.") and finding.severity is Severity.ERROR for finding in findings
    )


def test_preflight_without_a_model_directory_still_checks_the_flags(tmp_path: Path) -> None:
    findings = preflight_deployment(
        deployment_name="x",
        model_dir=tmp_path / "missing",
        engine="sglang",
        version="0.5.23",
        backend_parameters=["--gpu-memory-utilization 0.9"],
        env=[],
        gpus=None,
    )
    ids = {finding.check_id: finding.severity for finding in findings}
    assert ids.get("model.path-missing") is Severity.ERROR
    assert ids.get("param.unknown-flag") is Severity.ERROR
