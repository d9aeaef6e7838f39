"""Checks of the flags against the GPUs and the model: parallelism, parsers, MTP, served name."""

from __future__ import annotations

from pathlib import Path

import pytest
from param_fixtures import gpu, model_facts

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.parameters import check_parameters
from modelyard.hardware.gpus import GpuInfo
from modelyard.modeldir import ModelFacts


@pytest.fixture
def qwen36(tmp_path: Path) -> ModelFacts:
    return model_facts(tmp_path)


@pytest.fixture
def qwen3(tmp_path: Path) -> ModelFacts:
    return model_facts(tmp_path, "qwen3-8b")


def _run(
    parameters: list[str],
    model: ModelFacts | None = None,
    *,
    engine: str = "vllm",
    version: str = "0.25.0",
    gpus: list[GpuInfo] | None = None,
    gpu_count: int | None = None,
    name: str | None = None,
) -> list[Finding]:
    return check_parameters(
        engine=engine,
        version=version,
        backend_parameters=parameters,
        env={},
        deployment_name=name,
        model=model,
        gpus=gpus,
        gpu_count=gpu_count,
    )


def _with(findings: list[Finding], check_id: str) -> list[Finding]:
    return [finding for finding in findings if finding.check_id == check_id]


def test_tensor_parallel_size_larger_than_the_gpus_given() -> None:
    found = _with(_run(["--tensor-parallel-size 4"], gpu_count=2), "param.tensor-parallel-size")
    assert found and found[0].severity is Severity.ERROR and "needs 4 GPUs" in found[0].message
    assert _with(_run(["--tensor-parallel-size 2"], gpu_count=2), "param.tensor-parallel-size") == []


def test_gpus_left_idle_by_the_default_tensor_parallel_size() -> None:
    found = _with(
        _run(["--tp-size 1"], engine="sglang", version="0.5.23", gpu_count=2), "param.tensor-parallel-size"
    )
    assert found and found[0].severity is Severity.WARNING
    assert (
        _with(
            _run(["--tp-size 2"], engine="sglang", version="0.5.23", gpu_count=2),
            "param.tensor-parallel-size",
        )
        == []
    )


def test_tensor_parallel_size_that_does_not_divide_the_heads(qwen36: ModelFacts) -> None:
    # 24 attention heads: 8 divides them, 16 does not
    found = _with(_run(["--tensor-parallel-size 16"], qwen36, gpu_count=16), "param.tensor-parallel-heads")
    assert found and "24 attention heads" in found[0].message and "8" in found[0].fix
    assert _with(_run(["--tensor-parallel-size 8"], qwen36, gpu_count=8), "param.tensor-parallel-heads") == []


def test_gpus_of_different_models_in_one_group() -> None:
    mixed = [gpu(0), gpu(1, "NVIDIA A100-SXM4-40GB", 40)]
    found = _with(_run(["--tensor-parallel-size 2"], gpus=mixed), "param.mixed-gpus")
    assert found and found[0].severity is Severity.WARNING
    assert _with(_run(["--tensor-parallel-size 2"], gpus=[gpu(0), gpu(1)]), "param.mixed-gpus") == []


def test_hermes_parser_on_qwen36(qwen36: ModelFacts) -> None:
    found = _with(_run(["--tool-call-parser hermes"], qwen36), "param.tool-call-parser-mismatch")
    assert (
        found and found[0].severity is Severity.ERROR and found[0].fix == "use --tool-call-parser qwen3_coder"
    )
    assert _with(_run(["--tool-call-parser qwen3_coder"], qwen36), "param.tool-call-parser-mismatch") == []


def test_xml_parser_on_a_json_tool_template(qwen3: ModelFacts) -> None:
    found = _with(_run(["--tool-call-parser qwen3_coder"], qwen3), "param.tool-call-parser-mismatch")
    assert found and found[0].severity is Severity.WARNING
    assert _with(_run(["--tool-call-parser hermes"], qwen3), "param.tool-call-parser-mismatch") == []


def test_reasoning_parser_of_another_family_on_qwen36(qwen36: ModelFacts) -> None:
    found = _with(_run(["--reasoning-parser granite"], qwen36), "param.reasoning-parser-mismatch")
    assert found and found[0].fix == "use --reasoning-parser qwen3"
    assert found[0].severity is Severity.WARNING
    # The vLLM Qwen3.5 recipe's deepseek_r1 starts and reads thinking: a note, not a warning.
    found = _with(_run(["--reasoning-parser deepseek_r1"], qwen36), "param.reasoning-parser-mismatch")
    assert found and found[0].severity is Severity.INFO
    assert _with(_run(["--reasoning-parser qwen3"], qwen36), "param.reasoning-parser-mismatch") == []


def test_mtp_on_a_model_without_mtp_layers(qwen3: ModelFacts, qwen36: ModelFacts) -> None:
    mtp = ['--speculative-config \'{"method": "mtp", "num_speculative_tokens": 2}\'']
    found = _with(_run(mtp, qwen3), "param.mtp-without-layers")
    assert found and found[0].severity is Severity.ERROR
    assert _with(_run(mtp, qwen36), "param.mtp-without-layers") == []
    nextn = ["--speculative-algorithm NEXTN"]
    assert _with(_run(nextn, qwen3, engine="sglang", version="0.5.23"), "param.mtp-without-layers")
    assert _with(_run(nextn, qwen36, engine="sglang", version="0.5.23"), "param.mtp-without-layers") == []


def test_draft_model_speculation_needs_no_mtp_layers(qwen3: ModelFacts) -> None:
    eagle = ["--speculative-algorithm EAGLE", "--speculative-draft-model-path /models/draft"]
    assert _with(_run(eagle, qwen3, engine="sglang", version="0.5.23"), "param.mtp-without-layers") == []


def test_served_model_name_differs_from_the_deployment() -> None:
    found = _with(_run(["--served-model-name qwen36"], name="qwen"), "param.served-model-name")
    assert found and 'would get "model not found"' in found[0].message
    assert _with(_run(["--served-model-name qwen other"], name="qwen"), "param.served-model-name") == []


def test_sglang_auto_parsers_are_left_to_the_engine(qwen36: ModelFacts) -> None:
    auto = ["--tool-call-parser auto", "--reasoning-parser auto"]
    findings = _run(auto, qwen36, engine="sglang", version="0.5.23")
    assert [finding.check_id for finding in findings] == []


def test_multi_node_runs_are_not_counted_against_one_nodes_gpus() -> None:
    multi = ["--tensor-parallel-size 8", "--pipeline-parallel-size 2", "--nnodes 2"]
    assert _with(_run(multi, gpu_count=8), "param.tensor-parallel-size") == []
    assert _with(_run(multi[:2], gpu_count=8), "param.tensor-parallel-size")
    local = ["--tensor-parallel-size 2", "--data-parallel-size 4", "--data-parallel-size-local 2"]
    assert _with(_run(local, gpu_count=4), "param.tensor-parallel-size") == []


@pytest.mark.parametrize(("version", "warned"), [("0.16.0", True), ("0.10.0", True), ("0.17.0", False)])
def test_qwen3_parser_on_a_template_that_opens_thinking_follows_the_release(
    qwen36: ModelFacts, version: str, warned: bool
) -> None:
    findings = _with(
        _run(["--reasoning-parser", "qwen3"], qwen36, version=version), "param.reasoning-parser-mismatch"
    )
    assert bool(findings) is warned
    if warned:
        assert findings[0].severity is Severity.WARNING
        assert "opens <think> in the prompt" in findings[0].message and f"in {version}" in findings[0].message
        assert "--reasoning-parser deepseek_r1" in findings[0].fix and "0.17.0" in findings[0].fix


def test_qwen3_parser_on_qwen3s_own_template_is_quiet_on_old_releases(qwen3: ModelFacts) -> None:
    # Qwen3 (hybrid) writes <think> itself; its template closes the block only when thinking is off.
    findings = _run(["--reasoning-parser", "qwen3"], qwen3, version="0.10.0")
    assert _with(findings, "param.reasoning-parser-mismatch") == []
