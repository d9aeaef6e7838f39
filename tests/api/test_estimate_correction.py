"""The console's preflight (and every deployment's findings) shows the estimate corrected by this
installation's recorded starts: the ``memory.summary`` finding says by how many, and its details
carry the correction as data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from modelyard.estimate import GpuSpec, estimate_memory
from modelyard.estimate.correction import start_key
from modelyard.estimate.gpus import cuda_visible_total_bytes
from modelyard.modeldir import read_model_facts
from modelyard.store.tables import StartObservationRow
from modelyard.testing.stand_ins import build_stand_in

from .conftest import ApiHarness, add_model, fake_inventory

VERSION = "0.25.0"
PARAMETERS = ["--gpu-memory-utilization", "0.5", "--max-model-len", "8192"]


def test_the_preflight_summary_is_corrected_by_the_recorded_starts(api: ApiHarness, tmp_path: Path) -> None:
    # Four of Qwen3-8B's layers: weights the preflight's host check (host.ram-low) finds RAM for
    # on any CI host.
    model_dir = build_stand_in("qwen3-8b", tmp_path / "Qwen3-8B", config_changes={"num_hidden_layers": 4})
    add_model(api, model_dir, "qwen")
    api.controller.inventory = fake_inventory(1)
    gpu = api.controller.inventory.gpus[0]
    facts = read_model_facts(model_dir)
    predicted = estimate_memory(
        facts,
        "vllm",
        # CUDA's view of the GPU, as the preflight estimates it (NVML's total less the reservation).
        [GpuSpec(name=gpu.name, memory_total_bytes=cuda_visible_total_bytes(gpu.memory_total_bytes))],
        PARAMETERS,
        engine_version=VERSION,
    )
    key = start_key(predicted, engine_version=VERSION, architecture=facts.architecture, parameters=PARAMETERS)
    plan = predicted.plan_on_total
    with api.context.database.session() as session:
        for index, share in enumerate((0.93, 0.935)):
            session.add(
                StartObservationRow(
                    observed_at=datetime.now(UTC) - timedelta(minutes=2 - index),
                    deployment_name="qwen",
                    instance_uid=f"uid{index}",
                    replica_index=0,
                    start_number=index + 1,
                    engine="vllm",
                    engine_version=VERSION,
                    gpu_model=key.gpu_model,
                    architecture=key.architecture,
                    memory_fraction=0.5,
                    context_tokens=8192,
                    enforce_eager=False,
                    kv_dtype=key.kv_dtype,
                    tensor_parallel=1,
                    predicted_kv_bytes=plan.kv_cache_bytes,
                    predicted_kv_tokens=plan.kv_cache_tokens,
                    shown_kv_tokens=plan.kv_cache_tokens,
                    logged_kv_bytes=int(plan.kv_cache_bytes * share),
                    logged_kv_tokens=int(plan.kv_cache_tokens * share),
                    predicted_weights_bytes=predicted.weights_bytes,
                    predicted_activation_bytes=predicted.activation_bytes,
                    predicted_non_torch_bytes=predicted.non_torch_bytes,
                )
            )
        session.commit()
    body = {
        "model": "qwen",
        "backend": "vllm",
        "backend_version": VERSION,
        "gpus_per_replica": 1,
        "backend_parameters": " ".join(PARAMETERS),
    }
    verdict = api.client.post("/api/v1/deployments/preflight", json=body).json()
    [summary] = [finding for finding in verdict["findings"] if finding["check_id"] == "memory.summary"]
    corrected = summary["details"]["kv_cache_tokens"]
    # The raw estimate, what the correction moved and from how many starts, where the user reads it.
    # The median of the two starts' offsets: 7 % and 6.5 % short.
    offset_gib = (0.93 + 0.935) / 2 * plan.kv_cache_bytes / (1 << 30) - plan.kv_cache_bytes / (1 << 30)
    assert summary["message"].endswith(
        "corrected by 2 starts on this cluster (these settings), last error +7.0 %: "
        f"KV cache {offset_gib:.2f} GiB per GPU (-6.8 %), "
        f"{plan.kv_cache_tokens:,} tokens before correction ({corrected:,} after)"
    ), summary["message"]
    assert summary["details"]["uncorrected_kv_cache_tokens"] == plan.kv_cache_tokens
    correction = summary["details"]["correction"]
    assert correction["applied"] and correction["starts"] == 2
    assert correction["relative_offset"] < -0.06
    assert summary["details"]["kv_cache_tokens"] < plan.kv_cache_tokens * 0.94
