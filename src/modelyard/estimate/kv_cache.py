"""KV-cache bytes per token and linear-attention state bytes per sequence, per GPU.

The KV dtype is the one the engine will really use: ``--kv-cache-dtype auto`` (the default) means
the checkpoint's declared KV quantisation if any, else the dtype the model runs in, which is the
checkpoint's dtype except that float32 checkpoints run in bfloat16 (engines never keep fp32 KV
by default).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from modelyard.estimate.architecture import ModelShape
from modelyard.estimate.engine_arguments import EngineArguments
from modelyard.estimate.weights import dtype_bytes, pipeline_stages

_KV_DTYPE_BYTES: dict[str, float] = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float32": 4,
    "fp32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
    "int8": 1,
    "mxfp8": 1 + 1 / 32,
    "fp4_e2m1": 0.5 + 1 / 16,
    "nvfp4": 0.5 + 1 / 16,
}

# Model types whose linear-attention recurrent state the engines keep in float32 by default.
_FLOAT32_STATE_MODEL_TYPES = {
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_5_text",
    "qwen3_6",
    "qwen3_6_moe",
}


def serving_dtype(model_dtype: str | None, dtype_flag: str | None) -> str:
    """The dtype the engine runs the model in: ``--dtype`` when set, else the checkpoint's
    (float32 checkpoints are served in bfloat16)."""
    if dtype_flag and dtype_flag != "auto":
        return {"half": "float16", "bf16": "bfloat16", "float": "float32"}.get(dtype_flag, dtype_flag)
    if model_dtype in (None, "float32"):
        return "bfloat16"
    return model_dtype


def checkpoint_kv_dtype(quantization: dict[str, Any] | None) -> str | None:
    """KV quantisation a checkpoint declares (compressed-tensors ``kv_cache_scheme``, ModelOpt)."""
    if not quantization:
        return None
    scheme = quantization.get("kv_cache_scheme")
    if isinstance(scheme, dict) and scheme.get("num_bits") == 8:
        return "fp8"
    algorithm = quantization.get("kv_cache_quant_algo")
    if isinstance(algorithm, str) and "fp8" in algorithm.lower():
        return "fp8"
    return None


def resolve_kv_cache_dtype(
    flag: str | None, model_dtype: str | None, dtype_flag: str | None, quantization: dict[str, Any] | None
) -> str:
    if flag and flag != "auto":
        return flag.lower()
    return checkpoint_kv_dtype(quantization) or serving_dtype(model_dtype, dtype_flag)


def kv_dtype_bytes(kv_dtype: str) -> float:
    return _KV_DTYPE_BYTES.get(kv_dtype, 2)


@dataclass(frozen=True)
class CacheShape:
    """What one GPU keeps: bytes per token in full-attention (and MLA) layers, bytes per token in
    sliding-window layers (held for at most ``sliding_window_tokens`` per sequence), and the fixed
    state bytes per sequence of linear-attention layers. Sized for the pipeline stage that holds
    the most cache."""

    kv_dtype: str
    kv_bytes_per_token: int
    sliding_bytes_per_token: int
    sliding_window_tokens: int | None
    state_dtype: str | None
    state_bytes_per_sequence: int
    # Per-layer detail of the same stage (vLLM pages hybrid models layer by layer).
    attention_layer_count: int = 0
    linear_layer_count: int = 0
    kv_bytes_per_token_per_layer: int = 0
    state_bytes_per_layer: int = 0

    def sequence_bytes(self, context_tokens: int) -> int:
        """Cache bytes one sequence of ``context_tokens`` holds on one GPU."""
        window = (
            context_tokens
            if self.sliding_window_tokens is None
            else min(context_tokens, self.sliding_window_tokens)
        )
        return (
            context_tokens * self.kv_bytes_per_token
            + window * self.sliding_bytes_per_token
            + self.state_bytes_per_sequence
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _state_dtype(shape: ModelShape, model_type: str | None, arguments: EngineArguments, serving: str) -> str:
    if arguments.state_dtype and arguments.state_dtype != "auto":
        return arguments.state_dtype
    if shape.state_dtype:
        return shape.state_dtype
    if model_type in _FLOAT32_STATE_MODEL_TYPES or arguments.engine == "sglang":
        return "float32"
    return serving


def cache_shape(
    shape: ModelShape,
    model_type: str | None,
    model_dtype: str | None,
    quantization: dict[str, Any] | None,
    arguments: EngineArguments,
    *,
    attention_tensor_parallel: int | None = None,
    stages: list[range] | None = None,
) -> CacheShape:
    """Per-GPU cache sizes of ``shape`` under ``arguments`` (KV dtype, state dtype), with attention
    split over ``attention_tensor_parallel`` ranks (TP, or TP / DP with SGLang DP attention) and
    layers over the pipeline ``stages`` (even stages of ``arguments.pipeline_parallel`` by default)."""
    kv_dtype = resolve_kv_cache_dtype(arguments.kv_cache_dtype, model_dtype, arguments.dtype, quantization)
    element_bytes = kv_dtype_bytes(kv_dtype)
    serving = serving_dtype(model_dtype, arguments.dtype)
    tensor_parallel = attention_tensor_parallel or arguments.tensor_parallel
    heads_per_gpu = max(1, shape.key_value_heads // tensor_parallel)
    attention_token_bytes = heads_per_gpu * (shape.head_dim + shape.value_head_dim) * element_bytes
    mla_token_bytes = shape.mla_latent_dim * element_bytes
    state_dtype = _state_dtype(shape, model_type, arguments, serving) if shape.linear else None
    state_layer_bytes = 0.0
    if shape.linear is not None and state_dtype is not None:
        state_layer_bytes = shape.linear.conv_state_elements(tensor_parallel) * dtype_bytes(serving)
        state_layer_bytes += shape.linear.recurrent_state_elements(tensor_parallel) * dtype_bytes(
            state_dtype, 4
        )
    best = (0, 0, 0)
    counts = (0, 0)
    for stage in stages or pipeline_stages(shape.layer_count, arguments.pipeline_parallel):
        kinds = [shape.layer_kinds[index] for index in stage]
        full = kinds.count("full") * attention_token_bytes + kinds.count("mla") * mla_token_bytes
        sliding = kinds.count("sliding") * attention_token_bytes
        state = kinds.count("linear") * state_layer_bytes
        candidate = (math.ceil(full), math.ceil(sliding), math.ceil(state))
        if sum(candidate) > sum(best):
            best = candidate
            counts = (kinds.count("full") + kinds.count("mla"), kinds.count("linear"))
    per_layer = mla_token_bytes if shape.mla_latent_dim else attention_token_bytes
    return CacheShape(
        kv_dtype=kv_dtype,
        kv_bytes_per_token=best[0],
        sliding_bytes_per_token=best[1],
        sliding_window_tokens=shape.sliding_window_tokens if best[1] else None,
        state_dtype=state_dtype,
        state_bytes_per_sequence=best[2],
        attention_layer_count=counts[0],
        linear_layer_count=counts[1],
        kv_bytes_per_token_per_layer=math.ceil(per_layer),
        state_bytes_per_layer=math.ceil(state_layer_bytes),
    )
