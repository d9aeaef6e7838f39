"""Engine memory that is neither weights nor KV cache: activations, CUDA graphs, runtime buffers.

These are models, not measurements; each constant says where it comes from. Activations scale
with the batched-token budget the engine profiles at (vLLM's ``--max-num-batched-tokens``, SGLang's
``--chunked-prefill-size``) and with the sampler's logits for the largest batch of sequences.
"""

from __future__ import annotations

from modelyard.estimate.architecture import ModelShape

GIB = 1 << 30
MIB = 1 << 20

# Memory outside torch that the profile run adds on one GPU: 0.22 GiB for vLLM 0.25.0 on an H200
# ("non-torch forward increase memory"), 0.35 GiB in vLLM V0 logs; NCCL and custom all-reduce
# buffers add about 0.4 GiB per GPU once tensor or pipeline parallelism is on.
NON_TORCH_SINGLE_GPU_BYTES = int(0.22 * GIB)
NON_TORCH_LEGACY_SINGLE_GPU_BYTES = int(0.35 * GIB)
NON_TORCH_PARALLEL_EXTRA_BYTES = int(0.4 * GIB)
# The CUDA context torch creates before an engine measures free memory.
CUDA_CONTEXT_BYTES = int(0.5 * GIB)
# What SGLang 0.5.17 holds when it reads the free memory its --mem-fraction-static is a share of
# ("Load weight begin. avail mem"), as the sweeps logged it: 139.11-139.13 GiB of the H200's 139.8
# GiB CUDA total for every text model of docs/field-tests/memory-sweep-sglang-2026-12-07, 0.69 GiB
# at most (its CUDA context and torch's distributed set-up). The knob is set against it.
SGLANG_HELD_AT_MEASURE_BYTES = int(0.69 * GIB)
# CUDA graphs vLLM captures after sizing the KV cache: 1.0 GiB for Qwen3-8B (hidden 4096) on an
# H200 with vLLM 0.25.0 (its default capture sizes); scaled with the hidden size, at least 1/4.
# They live outside the KV budget, in the memory that --gpu-memory-utilization leaves out, so
# they matter for the headroom, not for the KV cache.
VLLM_CUDA_GRAPH_BYTES = int(1.0 * GIB)
# Activations of a multimodal encoder's profile run (one image of the largest size), roughly.
ENCODER_ACTIVATION_BYTES = int(1.0 * GIB)
# GPU memory already taken when SGLang 0.5.17 measures the free memory its fraction applies to
# ("Load weight begin. avail mem"), beyond the CUDA context, when the model is multimodal: 139.13
# GiB free for every text model of the 2026-12-07 sweep on an H200, 137.61 GiB for Qwen3.6-27B
# and Qwen2.5-VL-7B (their multimodal front end holds GPU memory of its own). Fitted on Qwen3.6-27B.
SGLANG_MULTIMODAL_PRELOAD_BYTES = int(1.52 * GIB)
# Multimodal architectures whose prefill SGLang 0.5.17 still captures in (breakable) CUDA graphs
# (configs/model_config.py ``multimodal_breakable_cuda_graph_supported_model_archs``); for every
# other multimodal model, and for MLA models, it turns prefill CUDA graphs off and reserves none.
SGLANG_MULTIMODAL_PREFILL_GRAPH_ARCHITECTURES = frozenset(
    {"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"}
)


def batched_tokens_default(engine: str, memory_total_bytes: int, gpu_name: str) -> int:
    """vLLM: 8192 on GPUs with >= 70 GiB (not A100), else 2048 (``vllm serve``). SGLang's chunked
    prefill size: 2048 below 35 GiB, 4096 below 60 GiB, 8192 below 160 GiB, 16384 above."""
    gib = memory_total_bytes / GIB
    if engine == "vllm":
        return 8192 if gib >= 70 and "a100" not in gpu_name.lower() else 2048
    if gib < 35:
        return 2048
    if gib < 60:
        return 4096
    return 8192 if gib < 160 else 16384


def max_sequences_default(engine: str, memory_total_bytes: int, gpu_name: str, tensor_parallel: int) -> int:
    """vLLM's ``--max-num-seqs`` default (1024 on H100-class, else 256). For SGLang, the decode
    CUDA-graph batch limit (``--cuda-graph-max-bs``), which also bounds its reserve."""
    gib = memory_total_bytes / GIB
    if engine == "vllm":
        return 1024 if gib >= 70 and "a100" not in gpu_name.lower() else 256
    if gib < 20:
        return 8
    if gib < 35:
        return 24 if tensor_parallel < 4 else 80
    if gib < 60:
        return 32 if tensor_parallel < 4 else 160
    return 256 if tensor_parallel < 4 else 512


def activation_bytes(
    shape: ModelShape,
    batched_tokens: int,
    sequences: int,
    dtype_bytes: float,
    tensor_parallel: int,
    *,
    legacy_engine: bool = False,
) -> int:
    """Peak activation memory of the engine's profile run: one forward pass over ``batched_tokens``
    tokens plus the sampler's logits for ``sequences`` sequences.

    Calibrated on vLLM 0.25.0 on an H200 (Qwen3-8B and Qwen3-32B shapes, 8192 tokens, 1024
    sequences: 1.29 and 1.52 GiB "torch peak memory increase"): 4 x hidden + MLP width values per
    token and 6 bytes per logit. vLLM's V0 engine (before 0.8) kept more per token and fewer
    logits (vllm-project/vllm#10517: 2.07 GiB at 20,000 tokens and 2.99 GiB at 29,000 for
    Llama-3.1-8B): 6 x hidden + 2 x MLP width values per token, 4 bytes per logit.
    """
    hidden = shape.hidden_size
    if shape.is_moe:
        width = (
            shape.experts_per_token * shape.expert_intermediate_size + shape.shared_expert_intermediate_size
        )
    else:
        width = shape.intermediate_size
    if legacy_engine:
        per_token = dtype_bytes * (6 * hidden + 2 * width / tensor_parallel)
    else:
        per_token = dtype_bytes * (4 * hidden + width / tensor_parallel)
    logit_bytes = 4 if legacy_engine else 6
    logits = min(sequences, batched_tokens) * shape.vocabulary_size * logit_bytes
    return int(batched_tokens * per_token + logits)


def non_torch_bytes(gpus_per_replica: int, *, legacy_engine: bool = False) -> int:
    single = NON_TORCH_LEGACY_SINGLE_GPU_BYTES if legacy_engine else NON_TORCH_SINGLE_GPU_BYTES
    return single + (NON_TORCH_PARALLEL_EXTRA_BYTES if gpus_per_replica > 1 else 0)


def _prefill_graph_sizes(max_tokens: int) -> list[int]:
    """SGLang's prefill CUDA-graph sizes up to the chunked-prefill size (8 MiB reserved each)."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64)]
    sizes += [*range(1280, 4097, 256), *range(4608, max_tokens + 1, 512)]
    return [size for size in sizes if size <= max_tokens]


def sglang_cuda_graph_bytes(
    chunked_prefill_tokens: int, cuda_graph_max_batch: int, *, prefill_graphs: bool = True
) -> int:
    """What SGLang's default reserves for CUDA graphs: 2 MiB per decode batch size, 8 MiB per
    prefill graph size (when it captures prefill graphs)."""
    prefill = len(_prefill_graph_sizes(chunked_prefill_tokens)) if prefill_graphs else 0
    return int((cuda_graph_max_batch * 2 + prefill * 8) * MIB)


def sglang_default_memory_fraction(
    memory_total_bytes: int,
    tensor_parallel: int,
    pipeline_parallel: int,
    chunked_prefill_tokens: int,
    cuda_graph_max_batch: int,
    cuda_graphs: bool,
    encoder_layers_hidden: tuple[int, int] | None,
    *,
    prefill_graphs: bool = True,
) -> float:
    """SGLang 0.5.x's ``--mem-fraction-static`` default (server_args ``_handle_gpu_memory_settings``):
    reserve 512 MiB + 1.5 MiB per chunked-prefill token + 1 GiB per 8 GPUs + 2 MiB per decode
    CUDA-graph batch size + 8 MiB per prefill CUDA-graph size (``prefill_graphs``: only where it
    captures them, ``reserve_for_graph_mb``), at least 10 GiB on GPUs above 60 GiB; vision models
    then scale it by 0.95 and by the encoder's size relative to a ViT-L
    (``adjust_mem_fraction_for_vlm``)."""
    gpu_mib = memory_total_bytes / MIB
    reserved_mib = 512 + max(chunked_prefill_tokens, 2048) * 1.5
    reserved_mib += tensor_parallel * pipeline_parallel / 8 * 1024
    if cuda_graphs:
        reserved_mib += cuda_graph_max_batch * 2
        if prefill_graphs:
            reserved_mib += len(_prefill_graph_sizes(chunked_prefill_tokens)) * 8
    if gpu_mib > 60 * 1024:
        reserved_mib = max(reserved_mib, 10 * 1024)
    fraction = round((gpu_mib - reserved_mib) / gpu_mib, 3)
    if encoder_layers_hidden is not None:
        layers, hidden = encoder_layers_hidden
        complexity = layers * hidden**2 / (24 * 1024**2)
        factor = max(0.8, min(1.05, 1.0 - 0.1 * (complexity - 1.0)))
        fraction = fraction * 0.95 * factor
    return fraction


# vLLM V0's scheduler default when chunked prefill is off (vllm/config.py _DEFAULT_MAX_NUM_BATCHED_TOKENS).
VLLM_V0_MIN_BATCHED_TOKENS = 2048
# V0 turned chunked prefill on by itself above 32K tokens of context, with a 512-token budget.
VLLM_V0_LONG_CONTEXT = 32 * 1024
VLLM_V0_CHUNKED_BATCHED_TOKENS = 512


def vllm_v0_batched_tokens(context_tokens: int, chunked_prefill: bool | None) -> int:
    """The token budget vLLM's V0 engine (before 0.8) profiles: without chunked prefill one whole
    ``max_model_len`` batch (``max(max_model_len, 2048)``), so a long context costs activation
    memory (vllm-project/vllm#10517: 2.07 GiB at 20,000 tokens, 2.99 GiB at 29,000); with it, 512
    tokens. Chunked prefill was on by default above 32K tokens of context."""
    chunked = chunked_prefill if chunked_prefill is not None else context_tokens > VLLM_V0_LONG_CONTEXT
    if chunked:
        return VLLM_V0_CHUNKED_BATCHED_TOKENS
    return max(context_tokens, VLLM_V0_MIN_BATCHED_TOKENS)


def sglang_04_memory_fraction(tensor_parallel: int) -> float:
    """SGLang 0.4's ``--mem-fraction-static`` default, by tensor-parallel size (server_args
    ``__post_init__``): 0.88, 0.87 from TP 2, 0.85 from 4, 0.81 from 8, 0.79 from 16."""
    for size, fraction in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if tensor_parallel >= size:
            return fraction
    return 0.88


def sglang_04_chunked_prefill(memory_total_bytes: int) -> int:
    """SGLang 0.4's ``--chunked-prefill-size`` default: 2048 below 25,000 MiB, else 8192."""
    return 2048 if memory_total_bytes / MIB < 25_000 else 8192


def sglang_04_cuda_graph_max_batch(memory_total_bytes: int, tensor_parallel: int) -> int:
    """SGLang 0.4's ``--cuda-graph-max-bs`` default: below 25,000 MiB 8 (80 from TP 4), else 160."""
    if memory_total_bytes / MIB < 25_000:
        return 8 if tensor_parallel < 4 else 80
    return 160
