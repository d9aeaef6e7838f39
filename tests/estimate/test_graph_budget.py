"""vLLM's CUDA graphs in the KV budget, by release and model runner, as read from the wheels'
code (estimate/graph_budget.py), and what that does to an estimate a user reads."""

from __future__ import annotations

from pathlib import Path

from modelyard.estimate import estimate_memory, parse_gpu_specs
from modelyard.estimate.graph_budget import (
    vllm_capture_size_count,
    vllm_cuda_graphs_in_budget,
    vllm_uses_v2_runner,
)
from modelyard.modeldir import read_model_facts

TESTS = Path(__file__).parent
QWEN3_8B = TESTS / "sweep" / "configs" / "qwen3-8b.json"
QWEN3_30B_A3B = TESTS / "evaluation" / "configs" / "qwen3-30b-a3b.json"


def test_the_graph_estimate_is_taken_from_the_budget_from_0_20_on_the_v1_runner() -> None:
    assert not vllm_cuda_graphs_in_budget("0.19.0", {}, uses_v2_runner=False)
    assert vllm_cuda_graphs_in_budget(
        "0.19.0", {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}, uses_v2_runner=False
    )
    assert vllm_cuda_graphs_in_budget("0.20.0", {}, uses_v2_runner=False)
    assert not vllm_cuda_graphs_in_budget(
        "0.24.0", {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}, uses_v2_runner=False
    )
    # The V2 runner answered 0 for its graphs until 0.29.
    assert not vllm_cuda_graphs_in_budget("0.25.0", {}, uses_v2_runner=True)
    assert vllm_cuda_graphs_in_budget("0.29.0", {}, uses_v2_runner=True)
    assert vllm_cuda_graphs_in_budget(None, {}, uses_v2_runner=True)  # unknown: the newest rules


def test_which_runner_a_start_gets_follows_each_release() -> None:
    assert not vllm_uses_v2_runner("0.20.0", ["Qwen3ForCausalLM"], moe=False, quantized=False, hybrid=False)
    assert vllm_uses_v2_runner("0.22.0", ["Qwen3ForCausalLM"], moe=False, quantized=False, hybrid=False)
    assert not vllm_uses_v2_runner("0.22.0", ["LlamaForCausalLM"], moe=False, quantized=False, hybrid=False)
    assert not vllm_uses_v2_runner("0.23.0", ["LlamaForCausalLM"], moe=False, quantized=True, hybrid=False)
    assert vllm_uses_v2_runner("0.24.0", ["LlamaForCausalLM"], moe=False, quantized=True, hybrid=False)
    assert vllm_uses_v2_runner("0.25.0", ["Phi3ForCausalLM"], moe=False, quantized=False, hybrid=False)
    assert not vllm_uses_v2_runner("0.25.0", ["Qwen3MoeForCausalLM"], moe=True, quantized=False, hybrid=False)
    assert not vllm_uses_v2_runner(
        "0.27.0", ["Qwen3_5ForConditionalGeneration"], moe=False, quantized=False, hybrid=True
    )
    assert vllm_uses_v2_runner(
        "0.25.0",
        ["Qwen3MoeForCausalLM"],
        moe=True,
        quantized=False,
        hybrid=False,
        env={"VLLM_USE_V2_MODEL_RUNNER": "1"},
    )


def test_capture_sizes_follow_max_num_seqs_and_speculative_tokens() -> None:
    assert vllm_capture_size_count(max_sequences=1024, speculative_tokens=0, batched_tokens=8192) == 51
    assert vllm_capture_size_count(max_sequences=1, speculative_tokens=0, batched_tokens=8192) == 2
    assert vllm_capture_size_count(max_sequences=2, speculative_tokens=3, batched_tokens=8192) == 5
    assert vllm_capture_size_count(max_sequences=256, speculative_tokens=0, batched_tokens=128) == 19


def test_a_moe_start_on_0_25_has_its_graphs_taken_from_the_kv_cache_a_dense_one_not() -> None:
    """Qwen3-30B-A3B runs on vLLM 0.25's V1 runner, which measures its graphs (0.5 GiB at hidden
    2048) and takes them from the KV budget; on 0.19 it did not. Qwen3-8B runs on the V2 runner,
    whose estimate was 0: the same KV on both."""
    gpus = parse_gpu_specs("1xH100")
    moe = read_model_facts(QWEN3_30B_A3B)
    arguments = ["--max-model-len 8192"]
    older = estimate_memory(moe, "vllm", gpus, arguments, engine_version="0.19.0")
    newer = estimate_memory(moe, "vllm", gpus, arguments, engine_version="0.25.0")
    assert newer.cuda_graphs_in_budget and not older.cuda_graphs_in_budget
    budget_moved = (newer.memory_fraction - older.memory_fraction) * gpus[0].memory_total_bytes
    taken = older.plan_on_total.kv_cache_bytes - newer.plan_on_total.kv_cache_bytes + budget_moved
    assert abs(taken - newer.cuda_graph_bytes) < 1 << 20
    dense = read_model_facts(QWEN3_8B)
    on_v2 = estimate_memory(dense, "vllm", gpus, arguments, engine_version="0.25.0")
    assert not on_v2.cuda_graphs_in_budget


def test_one_sequence_captures_a_few_graphs_and_loses_little_kv_to_them() -> None:
    gpus = parse_gpu_specs("1xRTX4090")
    moe = read_model_facts(QWEN3_30B_A3B)
    many = estimate_memory(moe, "vllm", gpus, ["--max-model-len 4096"], engine_version="0.25.0")
    one = estimate_memory(
        moe, "vllm", gpus, ["--max-model-len 4096", "--max-num-seqs 1"], engine_version="0.25.0"
    )
    assert one.cuda_graph_bytes * 20 < many.cuda_graph_bytes
