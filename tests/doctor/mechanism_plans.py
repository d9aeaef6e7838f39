"""Plans for the per-mechanism check tests: one planned start, and the findings doctor gives it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from modelyard.doctor.findings import Finding
from modelyard.doctor.host_facts import HostFacts
from modelyard.doctor.plan import DeploymentPlan, check_plan
from modelyard.estimate.gpus import parse_gpu_specs
from modelyard.modeldir import ModelFacts

QWEN3_8B: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}
# A host with no proxy, no hub cache, room in /dev/shm: only what a test sets can fire.
QUIET_HOST = HostFacts(shm_bytes=64 << 30, hub_cache_dir=Path("/nonexistent/hub-cache"))


def plan_findings(
    parameters: str | list[str] = "",
    *,
    engine: str = "vllm",
    version: str | None = "0.25.0",
    gpus: str = "1xH100",
    env: dict[str, str] | None = None,
    model: ModelFacts | None = None,
    host: HostFacts = QUIET_HOST,
    gpu_count: int | None = None,
    model_argument: str | None = None,
) -> list[Finding]:
    return check_plan(
        DeploymentPlan(
            engine=engine,
            version=version,
            backend_parameters=parameters,
            env=env or {},
            model=model,
            gpus=parse_gpu_specs(gpus) if gpus else [],
            gpu_count=gpu_count,
            host=host,
            model_argument=model_argument,
        )
    )


def of_id(findings: list[Finding], check_id: str) -> list[Finding]:
    return [finding for finding in findings if finding.check_id == check_id]
