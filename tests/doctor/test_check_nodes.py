"""Parallel layouts over several nodes (param.layout-over-nodes, param.tensor-parallel-across-nodes)."""

from __future__ import annotations

from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity


def test_ranks_that_do_not_split_over_the_nodes() -> None:
    findings = plan_findings("--tp-size 3 --nnodes 2", engine="sglang", version="0.5.10", gpus="2xH100")
    assert [f.severity for f in of_id(findings, "param.layout-over-nodes")] == [Severity.ERROR]
    even = plan_findings("--tp-size 4 --nnodes 2", engine="sglang", version="0.5.10", gpus="2xH100")
    assert of_id(even, "param.layout-over-nodes") == []


def test_tensor_parallel_over_two_nodes_with_ray_is_slow_but_starts() -> None:
    findings = plan_findings("--tensor-parallel-size 16 --distributed-executor-backend ray", gpus="8xH100")
    across = of_id(findings, "param.tensor-parallel-across-nodes")
    assert [f.severity for f in across] == [Severity.WARNING]
    assert "--pipeline-parallel-size 2" in across[0].fix
    recommended = plan_findings(
        "--tensor-parallel-size 8 --pipeline-parallel-size 2 --distributed-executor-backend ray",
        gpus="8xH100",
    )
    assert of_id(recommended, "param.tensor-parallel-across-nodes") == []


def test_a_layout_larger_than_the_gpus_given_on_one_node_is_refused() -> None:
    findings = plan_findings("--tensor-parallel-size 4 --pipeline-parallel-size 2", gpus="4xH100")
    assert [f.severity for f in of_id(findings, "param.tensor-parallel-size")] == [Severity.ERROR]
