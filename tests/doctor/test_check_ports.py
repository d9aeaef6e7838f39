"""Every port the engine binds against the ports held (host.port-in-use), and VLLM_PORT's form."""

from __future__ import annotations

from pathlib import Path

from mechanism_plans import of_id, plan_findings

from modelyard.doctor.findings import Severity
from modelyard.doctor.host_facts import HostFacts


def _holding(*ports: int) -> HostFacts:
    return HostFacts(shm_bytes=64 << 30, ports_in_use=frozenset(ports), hub_cache_dir=Path("/nonexistent"))


def _held(parameters: str, *ports: int, engine: str = "vllm", gpus: str = "1xH100") -> list[tuple[int, str]]:
    version = "0.25.0" if engine == "vllm" else "0.5.10"
    findings = plan_findings(parameters, engine=engine, version=version, gpus=gpus, host=_holding(*ports))
    return [(f.details["port"], f.details["flag"]) for f in of_id(findings, "host.port-in-use")]


def test_the_default_http_port_of_each_engine() -> None:
    assert _held("", 8000) == [(8000, "--port")]
    assert _held("", 30000, engine="sglang") == [(30000, "--port")]
    assert _held("--port 8001", 8000) == []


def test_vllm_data_parallel_coordinator_port() -> None:
    assert _held("--data-parallel-size 2", 29550, gpus="2xH100") == [(29550, "--data-parallel-rpc-port")]
    assert _held("", 29550) == []  # no data parallelism, no coordinator


def test_sglang_nccl_and_first_node_ports() -> None:
    assert _held("--nccl-port 29000", 29000, engine="sglang") == [(29000, "--nccl-port")]
    address = "--dist-init-addr 10.0.0.1:5000 --nnodes 2 --tp-size 2"
    assert _held(f"{address} --node-rank 0", 5000, engine="sglang") == [(5000, "--dist-init-addr")]
    assert _held(f"{address} --node-rank 1", 5000, engine="sglang") == []


def test_a_kubernetes_service_named_vllm_breaks_vllm_port() -> None:
    findings = of_id(
        plan_findings(env={"VLLM_PORT": "tcp://10.96.0.12:8000"}), "param.vllm-port-not-a-number"
    )
    assert [f.severity for f in findings] == [Severity.ERROR]
    assert "Kubernetes" in findings[0].message
    assert of_id(plan_findings(env={"VLLM_PORT": "12345"}), "param.vllm-port-not-a-number") == []
