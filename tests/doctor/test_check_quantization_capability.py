"""A quantized checkpoint against the compute capability its kernels need, per engine
(model.quantization-unsupported-by-gpu): an error where every release refuses, a warning where
some do, nothing where all run it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mechanism_plans import QWEN3_8B, of_id, plan_findings

from modelyard.doctor.findings import Severity
from modelyard.modeldir import ModelFacts

FP8_BLOCK = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
}


def _compressed(weights: dict[str, Any], activations: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": weights, "input_activations": activations}
        },
    }


W4A16 = _compressed({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True})
W8A8_INT8 = _compressed(
    {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True},
    {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True},
)
W8A8_FP8 = _compressed(
    {"num_bits": 8, "type": "float", "strategy": "channel"}, {"num_bits": 8, "type": "float", "dynamic": True}
)


def _severities(quantization: dict[str, Any], gpus: str, engine: str = "vllm") -> list[Severity]:
    model = ModelFacts(
        directory=Path("/models/quantized"), config={**QWEN3_8B, "quantization_config": quantization}
    )
    version = "0.5.6" if engine == "sglang" else "0.25.0"
    findings = plan_findings("--dtype half", engine=engine, version=version, gpus=gpus, model=model)
    return [finding.severity for finding in of_id(findings, "model.quantization-unsupported-by-gpu")]


def test_fp8_checkpoints_per_engine() -> None:
    # vLLM: Marlin runs FP8 weight-only from 8.0 on every release of the tables, 7.5 only later.
    assert _severities(FP8_BLOCK, "1xV100") == [Severity.ERROR]
    assert _severities(FP8_BLOCK, "1xT4") == [Severity.WARNING]
    assert _severities(FP8_BLOCK, "1xA100") == []
    # SGLang: get_min_capability 8.0; Triton's e4m3 kernels need 8.9 unless Marlin takes the layers.
    assert _severities(FP8_BLOCK, "1xT4", engine="sglang") == [Severity.ERROR]
    assert _severities(FP8_BLOCK, "2xA10", engine="sglang") == [Severity.WARNING]
    assert _severities(FP8_BLOCK, "1xL40S", engine="sglang") == []


def test_the_warning_names_what_the_releases_do() -> None:
    model = ModelFacts(directory=Path("/models/fp8"), config={**QWEN3_8B, "quantization_config": FP8_BLOCK})
    findings = plan_findings("", engine="sglang", version="0.5.6", gpus="1xA100", model=model)
    (finding,) = of_id(findings, "model.quantization-unsupported-by-gpu")
    assert "SGLANG_FORCE_FP8_MARLIN=1" in finding.message and "8.9" in finding.message


def test_compressed_tensors_schemes() -> None:
    assert _severities(W4A16, "1xV100") == [Severity.ERROR]
    assert _severities(W4A16, "1xT4") == [Severity.WARNING]
    assert _severities(W4A16, "1xRTX3090") == []
    assert _severities(W8A8_INT8, "1xV100", engine="sglang") == [Severity.ERROR]
    assert _severities(W8A8_INT8, "1xT4") == []
    assert _severities(W8A8_FP8, "1xV100") == [Severity.ERROR]
    assert _severities(W8A8_FP8, "1xA100") == []


def test_schemes_doctor_does_not_know_stay_quiet() -> None:
    assert _severities({"quant_method": "bitsandbytes", "load_in_4bit": True}, "1xV100") == []
    assert _severities(_compressed({"num_bits": 4, "type": "float"}), "1xV100") == []


def _unknown(method: str, version: str | None, engine: str = "vllm") -> list[Severity]:
    model = ModelFacts(
        directory=Path("/models/q"), config={**QWEN3_8B, "quantization_config": {"quant_method": method}}
    )
    findings = plan_findings("", engine=engine, version=version, model=model)
    return [finding.severity for finding in of_id(findings, "model.quantization-unknown")]


def test_a_method_the_release_does_not_have() -> None:
    # gpt-oss's mxfp4 came in vLLM 0.10.1; QQQ went after 0.10.1.1.
    assert _unknown("mxfp4", "0.10.0") == [Severity.ERROR]
    assert _unknown("mxfp4", "0.10.1") == []
    assert _unknown("qqq", "0.12.0") == [Severity.ERROR]
    assert _unknown("qqq", "0.9.2") == []


def test_releases_and_names_doctor_cannot_judge_stay_quiet() -> None:
    assert _unknown("mxfp4", None) == []  # no version: no table
    assert _unknown("mxfp4", "0.8.5") == []  # the table of 0.8.5 lists no --quantization choices
    assert _unknown("some-new-method", "0.10.0") == []  # no release of the tables has it
    assert _unknown("mxfp4", "0.4.9", engine="sglang") == []


def test_mxfp4_in_vllm() -> None:
    mxfp4 = {"quant_method": "mxfp4"}
    assert _severities(mxfp4, "1xT4") == [Severity.ERROR]  # get_min_capability 80 (90 at first)
    assert _severities(mxfp4, "1xA100") == [Severity.WARNING]
    assert _severities(mxfp4, "1xH100") == []
    assert _severities(mxfp4, "1xT4", engine="sglang") == []  # SGLang's minimum is not known here
