"""Pipeline stages on GPUs of different memory (param.mixed-gpus): vLLM splits the layers evenly unless
VLLM_PP_LAYER_PARTITION says otherwise, and every rank gets the KV blocks of the smallest."""

from __future__ import annotations

from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity


def test_pipeline_stages_on_an_80_and_a_40_gib_gpu_name_the_layer_partition() -> None:
    findings = of_id(
        plan_findings("--pipeline-parallel-size 2", gpus="1xA100-80GB,1xA100-40GB"), "param.mixed-gpus"
    )
    assert [finding.severity for finding in findings] == [Severity.WARNING]
    assert "pipeline stages" in findings[0].message and "KV cache of the smallest" in findings[0].message
    assert "VLLM_PP_LAYER_PARTITION" in findings[0].fix


def test_a_given_partition_is_read_back_to_the_user() -> None:
    findings = of_id(
        plan_findings(
            "--pipeline-parallel-size 2",
            gpus="1xA100-80GB,1xA100-40GB",
            env={"VLLM_PP_LAYER_PARTITION": "24,12"},
        ),
        "param.mixed-gpus",
    )
    assert "the layers VLLM_PP_LAYER_PARTITION names" in findings[0].message


def test_tensor_parallel_over_mixed_gpus_keeps_the_shard_wording() -> None:
    findings = of_id(
        plan_findings("--tensor-parallel-size 2", gpus="1xA100-80GB,1xA100-40GB"), "param.mixed-gpus"
    )
    assert "tensor-parallel group" in findings[0].message


def test_matching_gpus_give_no_mixed_finding() -> None:
    assert of_id(plan_findings("--pipeline-parallel-size 2", gpus="2xA100-80GB"), "param.mixed-gpus") == []
