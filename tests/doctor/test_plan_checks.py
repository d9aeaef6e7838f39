"""Each check of a planned start: it fires on the bad plan and stays quiet on the good one.

The bad plans are the shapes of real reports (tests/doctor/corpus names them); the good ones
differ in the one thing the check is about.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from modelyard.doctor.findings import Finding, Severity
from modelyard.doctor.host_facts import HostFacts
from modelyard.doctor.plan import DeploymentPlan, check_plan
from modelyard.estimate.gpus import GIB, GpuSpec, parse_gpu_specs
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
EMPTY_HOST = HostFacts(hub_cache_dir=Path("/nonexistent"))


def _model(**changes: Any) -> ModelFacts:
    return ModelFacts(directory=Path("/models/test"), config={**QWEN3_8B, **changes})


def _ids(
    parameters: str,
    *,
    engine: str = "vllm",
    version: str | None = "0.25.0",
    gpus: str | list[GpuSpec] = "1xH100",
    env: dict[str, str] | None = None,
    model: ModelFacts | None = None,
    host: HostFacts = EMPTY_HOST,
    model_argument: str | None = None,
    gpu_count: int | None = None,
) -> dict[str, Finding]:
    plan = DeploymentPlan(
        engine=engine,
        version=version,
        backend_parameters=parameters,
        env=env or {},
        model=model,
        gpus=parse_gpu_specs(gpus) if isinstance(gpus, str) else gpus,
        gpu_count=gpu_count,
        host=host,
        model_argument=model_argument,
    )
    return {
        finding.check_id: finding for finding in check_plan(plan) if finding.severity is not Severity.INFO
    }


def _error(findings: dict[str, Finding], check_id: str) -> Finding:
    assert check_id in findings, sorted(findings)
    assert findings[check_id].severity is Severity.ERROR
    assert findings[check_id].fix
    return findings[check_id]


# -- layout ---------------------------------------------------------------------------------------


def test_data_parallel_counts_against_the_gpus_given() -> None:
    found = _error(_ids("--data-parallel-size=2", gpus="1x48GB"), "param.tensor-parallel-size")
    assert "needs 2 GPUs" in found.message
    assert "param.tensor-parallel-size" not in _ids("--data-parallel-size=2", gpus="2x48GB")


def test_sglang_dp_attention_shares_the_tensor_parallel_gpus() -> None:
    sharing = "--tp-size 4 --dp-size 4 --enable-dp-attention"
    assert "param.tensor-parallel-size" not in _ids(sharing, engine="sglang", version="0.5.17", gpus="4xH100")
    replicas = "--tp-size 4 --dp-size 2"
    found = _ids(replicas, engine="sglang", version="0.5.17", gpus="4xH100")
    assert "needs 8 GPUs" in _error(found, "param.tensor-parallel-size").message


def test_key_value_heads_that_neither_split_nor_replicate_evenly() -> None:
    model = _model(num_attention_heads=40, num_key_value_heads=10)
    _error(_ids("--tensor-parallel-size 4", gpus="4xH100", model=model), "param.tensor-parallel-heads")
    assert "param.tensor-parallel-heads" not in _ids("--tensor-parallel-size 2", gpus="2xH100", model=model)
    replicated = _model(num_attention_heads=32, num_key_value_heads=8)
    assert "param.tensor-parallel-heads" not in _ids("-tp 16", gpus="16xH100", model=replicated)


def test_pipeline_layer_partition_must_add_up_to_the_layers() -> None:
    bad = _ids("-pp 2", gpus="2xH100", model=_model(), env={"VLLM_PP_LAYER_PARTITION": "18,20"})
    _error(bad, "param.pipeline-layer-partition")
    good = _ids("-pp 2", gpus="2xH100", model=_model(), env={"VLLM_PP_LAYER_PARTITION": "16,20"})
    assert "param.pipeline-layer-partition" not in good


def test_sglang_expert_parallel_size_must_divide_the_tensor_parallel_size() -> None:
    moe = _model(num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768)
    bad = _ids("--tp-size 4 --ep-size 3", engine="sglang", version="0.5.17", gpus="4xH100", model=moe)
    _error(bad, "param.expert-parallel-experts")
    good = _ids("--tp-size 4 --ep-size 4", engine="sglang", version="0.5.17", gpus="4xH100", model=moe)
    assert "param.expert-parallel-experts" not in good


def test_sglang_dp_attention_groups_must_divide_the_tensor_parallel_size() -> None:
    bad = _ids(
        "--tp-size 4 --dp-size 3 --enable-dp-attention", engine="sglang", version="0.5.17", gpus="4xH100"
    )
    _error(bad, "param.data-parallel-attention")
    good = _ids(
        "--tp-size 4 --dp-size 2 --enable-dp-attention", engine="sglang", version="0.5.17", gpus="4xH100"
    )
    assert "param.data-parallel-attention" not in good


# -- what the model's config allows ---------------------------------------------------------------


def test_context_beyond_the_models_positions() -> None:
    found = _error(_ids("--max-model-len 131072", model=_model()), "model.context-beyond-model")
    assert "40,960" in found.message
    allowed = _ids("--max-model-len 131072", model=_model(), env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    assert "model.context-beyond-model" not in allowed
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert "model.context-beyond-model" not in _ids("--max-model-len 131072", model=_model(rope_scaling=yarn))


def test_the_smallest_length_key_counts() -> None:
    qwen_v1 = _model(max_position_embeddings=8192, seq_length=2048)
    _error(_ids("--max-model-len 4096", model=qwen_v1), "model.context-beyond-model")
    assert "model.context-beyond-model" not in _ids("--max-model-len 2048", model=qwen_v1)


def test_bfloat16_on_a_gpu_without_it() -> None:
    old = _ids("", version="0.8.5", gpus="1xV100-32GB", model=_model())
    _error(old, "model.dtype-unsupported-by-gpu")
    assert "model.dtype-unsupported-by-gpu" not in _ids(
        "--dtype half", version="0.8.5", gpus="1xV100-32GB", model=_model()
    )
    # vLLM 0.9 picks float16 by itself; an explicit bfloat16 is still refused
    assert "model.dtype-unsupported-by-gpu" not in _ids("", version="0.9.0", gpus="1xT4", model=_model())
    _error(
        _ids("--dtype bfloat16", version="0.9.0", gpus="1xT4", model=_model()),
        "model.dtype-unsupported-by-gpu",
    )


def test_quantization_argument_of_another_method() -> None:
    fp8 = _model(quantization_config={"quant_method": "fp8"})
    _error(_ids("--quantization gguf", model=fp8), "model.quantization-mismatch")
    gptq = _model(quantization_config={"quant_method": "gptq", "bits": 4})
    assert "model.quantization-mismatch" not in _ids("--quantization gptq_marlin", model=gptq)


def test_awq_checkpoint_on_a_gpu_older_than_it_needs() -> None:
    awq = _model(quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128})
    found = _error(
        _ids("--dtype half", version="0.9.0", gpus="1xV100-32GB", model=awq),
        "model.quantization-unsupported-by-gpu",
    )
    assert "7.5" in found.message and "7.0" in found.message
    assert "model.quantization-unsupported-by-gpu" not in _ids(
        "--dtype half", version="0.9.0", gpus="1xT4", model=awq
    )
    assert "model.quantization-unsupported-by-gpu" not in _ids("", gpus="1xV100-32GB", model=_model())


# -- the environment the engine talks through ------------------------------------------------------


def test_proxy_without_no_proxy_for_sglangs_own_address() -> None:
    env = {"https_proxy": "http://proxy:3128", "no_proxy": "localhost,127.0.0.1"}
    found = _ids("--host 0.0.0.0", engine="sglang", version="0.5.17", env=env)
    assert "0.0.0.0" in _error(found, "param.proxy-intercepts-engine").message
    covered = {**env, "no_proxy": "localhost,127.0.0.1,0.0.0.0"}
    assert "param.proxy-intercepts-engine" not in _ids(
        "--host 0.0.0.0", engine="sglang", version="0.5.17", env=covered
    )
    assert "param.proxy-intercepts-engine" not in _ids("", engine="sglang", version="0.5.17", env=env)


def test_proxy_in_the_servers_environment_reaches_the_engine() -> None:
    host = HostFacts(environment={"HTTP_PROXY": "http://proxy:3128"}, hub_cache_dir=Path("/nonexistent"))
    _error(_ids("", engine="sglang", version="0.5.17", host=host), "param.proxy-intercepts-engine")


def test_hub_id_while_the_hub_is_offline(tmp_path: Path) -> None:
    offline = {"HF_HUB_OFFLINE": "1"}
    _error(_ids("", env=offline, model_argument="Qwen/Qwen3-8B"), "param.offline-hub-id")
    assert "param.offline-hub-id" not in _ids("", env=offline, model_argument=str(tmp_path))
    (tmp_path / "models--Qwen--Qwen3-8B" / "snapshots").mkdir(parents=True)
    cached = HostFacts(hub_cache_dir=tmp_path)
    assert "param.offline-hub-id" not in _ids("", env=offline, model_argument="Qwen/Qwen3-8B", host=cached)


def test_a_tokenizer_by_hub_id_is_a_warning(tmp_path: Path) -> None:
    found = _ids("--tokenizer hf-internal-testing/llama-tokenizer")
    assert found["param.hub-id-argument"].severity is Severity.WARNING
    assert "param.hub-id-argument" not in _ids(f"--tokenizer {tmp_path}")


def test_visible_devices_set_for_the_engine() -> None:
    found = _ids("-tp 2", gpus="2xH100", env={"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5"})
    assert "share those GPUs" in _error(found, "param.visible-devices-mismatch").message
    assert "param.visible-devices-mismatch" not in _ids("-tp 2", gpus="2xH100")


# -- what the machine gives a start ---------------------------------------------------------------


def test_small_shared_memory_for_a_multi_gpu_replica() -> None:
    docker = HostFacts(in_container=True, shm_bytes=64 << 20, hub_cache_dir=Path("/nonexistent"))
    _error(_ids("-tp 2", gpus="2xH100", host=docker), "host.shared-memory-small")
    assert "host.shared-memory-small" not in _ids("", gpus="1xH100", host=docker)
    roomy = HostFacts(in_container=True, shm_bytes=16 * GIB, hub_cache_dir=Path("/nonexistent"))
    assert "host.shared-memory-small" not in _ids("-tp 2", gpus="2xH100", host=roomy)


def test_container_image_newer_than_the_driver_on_a_consumer_gpu() -> None:
    old = HostFacts(in_container=True, driver_version="535.171.04", hub_cache_dir=Path("/nonexistent"))
    _error(_ids("", version="0.4.3", gpus="1xRTX4090", host=old), "host.driver-too-old")
    new = HostFacts(in_container=True, driver_version="550.54.14", hub_cache_dir=Path("/nonexistent"))
    assert "host.driver-too-old" not in _ids("", version="0.4.3", gpus="1xRTX4090", host=new)
    pip = HostFacts(in_container=False, driver_version="535.171.04", hub_cache_dir=Path("/nonexistent"))
    found = _ids("", version="0.4.3", gpus="1xRTX4090", host=pip)
    assert (
        found.get("host.driver-too-old") is None or found["host.driver-too-old"].severity is Severity.WARNING
    )


def test_blackwell_gpu_with_a_build_before_cuda_12_8() -> None:
    _error(_ids("", version="0.8.4", gpus="1xRTX5090"), "host.gpu-architecture-unsupported")
    assert "host.gpu-architecture-unsupported" not in _ids("", version="0.9.0", gpus="1xRTX5090")


def test_port_held_by_another_process() -> None:
    busy = HostFacts(ports_in_use=frozenset({19000}), hub_cache_dir=Path("/nonexistent"))
    _error(_ids("--port 19000", host=busy), "host.port-in-use")
    assert "host.port-in-use" not in _ids("--port 19001", host=busy)


# -- the memory knob ---------------------------------------------------------------------------------


def _busy(spec: str, free_gib: float) -> list[GpuSpec]:
    return [GpuSpec(gpu.name, gpu.memory_total_bytes, int(free_gib * GIB)) for gpu in parse_gpu_specs(spec)]


def test_utilization_above_the_free_memory() -> None:
    _error(_ids("", gpus=_busy("1x23.52GB", 1.52)), "memory.free-memory-too-low")
    assert "memory.free-memory-too-low" not in _ids(
        "--gpu-memory-utilization 0.05", gpus=_busy("1x23.52GB", 1.52)
    )


def test_old_vllm_counts_other_engines_against_its_utilization() -> None:
    l40s = _busy("1xL40S", 35.5)
    v1 = {"VLLM_USE_V1": "1"}
    _error(
        _ids("--gpu-memory-utilization 0.2", version="0.7.3", gpus=l40s, env=v1), "memory.free-memory-too-low"
    )
    assert "memory.free-memory-too-low" not in _ids(
        "--gpu-memory-utilization 0.2", version="0.8.5", gpus=l40s
    )


def test_utilization_that_leaves_no_room_for_cuda_graphs() -> None:
    sixteen = "2x15.77GB"
    _error(
        _ids("-tp 2 --gpu-memory-utilization 0.95", version="0.6.4", gpus=sixteen),
        "memory.fraction-leaves-no-headroom",
    )
    quiet = _ids("-tp 2 --gpu-memory-utilization 0.9", version="0.6.4", gpus=sixteen)
    assert quiet.get("memory.fraction-leaves-no-headroom") is None
    eager = _ids("-tp 2 --gpu-memory-utilization 0.95 --enforce-eager", version="0.6.4", gpus=sixteen)
    assert eager.get("memory.fraction-leaves-no-headroom") is None


def test_the_headroom_follows_where_the_models_start_counts_its_cuda_graphs() -> None:
    # vLLM 0.25 starts a dense Qwen3 on its V2 model runner, which captures the graphs after sizing
    # the KV cache (the H100 field run of 2026-12-07 logged "Using V2 Model Runner" and 0.11 GiB
    # of graphs after the cache): 0.8 GiB outside the budget is too little. Forced onto the V1
    # runner, the same start takes its graphs from the budget and needs only the allocator's slack.
    model = _model()
    v2 = _ids("--gpu-memory-utilization 0.99", gpus="1x80GB", model=model)
    _error(v2, "memory.fraction-leaves-no-headroom")
    v1 = _ids(
        "--gpu-memory-utilization 0.99", gpus="1x80GB", model=model, env={"VLLM_USE_V2_MODEL_RUNNER": "0"}
    )
    # What is left is the estimator's warning of the same id (a fraction above the safe one), not
    # the refusal: that start survives.
    assert v1["memory.fraction-leaves-no-headroom"].severity is Severity.WARNING


def test_a_fraction_that_is_not_one() -> None:
    _error(_ids("--gpu-memory-utilization 1.5"), "memory.invalid-fraction")
    assert "memory.invalid-fraction" not in _ids("--gpu-memory-utilization 0.5")
