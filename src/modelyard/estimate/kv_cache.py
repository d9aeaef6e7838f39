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
    "fp4_mx_block16": 0.5 + 1 / 16,
    "nvfp4": 0.5 + 1 / 16,
}

# vLLM's TurboQuant presets (model_executor/layers/quantization/turboquant/config.py, TQ_PRESETS):
# bits of a key and of a value element. Keys of 8 bits are FP8; fewer are MSE indices plus a
# float16 norm; values are uniform with a float16 scale and zero.
_TURBOQUANT_BITS: dict[str, tuple[int, int]] = {
    "turboquant_k8v4": (8, 4),
    "turboquant_4bit_nc": (4, 4),
    "turboquant_k3v4_nc": (3, 4),
    "turboquant_3bit_nc": (3, 3),
}
# vLLM's dynamic per-token-head KV dtypes: the element's bytes, plus one float32 scale per token
# and KV head for K and one for V ("a separate scale per (token, KV head)").
_PER_TOKEN_HEAD_BYTES: dict[str, float] = {
    "int8_per_token_head": 1,
    "fp8_per_token_head": 1,
    "int4_per_token_head": 0.5,
}
PER_TOKEN_HEAD_SCALE_BYTES = 4
# TurboQuant leaves the first and last 2 attention layers of a dense model at the model's dtype
# (TurboQuantConfig.get_boundary_skip_layers); hybrid models get no such protection.
TURBOQUANT_BOUNDARY_LAYERS = 2

# Model types whose linear-attention recurrent state vLLM keeps in float32 when the config names no
# dtype (vLLM 0.25 models/config.py: NemotronH's DEFAULT_MAMBA_SSM_CACHE_DTYPE). Every other model,
# Qwen3-Next and a Qwen3.5/3.6 config without ``mamba_ssm_dtype`` among them, keeps it in the model's
# dtype ("auto"); Qwen3.5/3.6 checkpoints name float32 in their config, which is read first.
_VLLM_FLOAT32_STATE_MODEL_TYPES = {"nemotron_h"}


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
    """Bytes of one cached element in ``kv_dtype`` (per-head overheads averaged over 128-wide
    heads for the per-token-head and TurboQuant dtypes; ``kv_head_bytes`` is exact)."""
    if kv_dtype in _TURBOQUANT_BITS or kv_dtype in _PER_TOKEN_HEAD_BYTES:
        return kv_head_bytes(kv_dtype, 128, 128) / 256
    return _KV_DTYPE_BYTES.get(kv_dtype, 2)


def known_kv_dtype(kv_dtype: str) -> bool:
    """Whether the estimator knows ``kv_dtype``'s size (unknown ones count as two bytes)."""
    return kv_dtype in _KV_DTYPE_BYTES or kv_dtype in _TURBOQUANT_BITS or kv_dtype in _PER_TOKEN_HEAD_BYTES


def is_turboquant(kv_dtype: str) -> bool:
    return kv_dtype in _TURBOQUANT_BITS


def kv_head_bytes(kv_dtype: str, head_dim: int, value_head_dim: int) -> float:
    """Bytes one token keeps per KV head (its K and its V) in ``kv_dtype``.

    TurboQuant packs K and V into one slot (``TurboQuantConfig.slot_size_aligned``): an FP8 key
    is ``head_dim`` bytes, an MSE key ``ceil(head_dim x bits / 8) + 2``; a value
    ``ceil(head_dim x bits / 8) + 4``; the sum rounded up to even. Per-token-head dtypes add
    their scales; every other dtype is its element size times ``head_dim + value_head_dim``."""
    if kv_dtype in _TURBOQUANT_BITS:
        key_bits, value_bits = _TURBOQUANT_BITS[kv_dtype]
        key = head_dim if key_bits == 8 else math.ceil(head_dim * key_bits / 8) + 2
        value = math.ceil(head_dim * value_bits / 8) + 4
        slot = key + value
        return slot + slot % 2
    if kv_dtype in _PER_TOKEN_HEAD_BYTES:
        element = _PER_TOKEN_HEAD_BYTES[kv_dtype]
        return (head_dim + value_head_dim) * element + 2 * PER_TOKEN_HEAD_SCALE_BYTES
    return (head_dim + value_head_dim) * _KV_DTYPE_BYTES.get(kv_dtype, 2)


def turboquant_boundary_layers(shape: ModelShape) -> frozenset[int]:
    """The attention layers TurboQuant keeps at the model's dtype: the first and last two of a
    dense model, none of a hybrid one."""
    if shape.is_hybrid_linear:
        return frozenset()
    attention = [index for index, kind in enumerate(shape.layer_kinds) if kind in ("full", "sliding")]
    count = min(TURBOQUANT_BOUNDARY_LAYERS, len(attention) // 2)
    return frozenset(attention[:count] + attention[len(attention) - count :])


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
    sliding_layer_count: int = 0
    # vLLM: a hybrid model's state blocks per sequence beyond the first (``num_speculative_blocks``).
    speculative_state_blocks: int = 0
    # vLLM admits a sequence's sliding-window layers for min(window - 1 + max_num_batched_tokens,
    # max_model_len) tokens (SlidingWindowSpec.max_admission_blocks_per_request); None: the window.
    sliding_admission_tokens: int | None = None

    def sequence_bytes(self, context_tokens: int) -> int:
        """Cache bytes one sequence of ``context_tokens`` holds on one GPU."""
        if self.sliding_admission_tokens is not None:
            window = min(context_tokens, self.sliding_admission_tokens)
        elif self.sliding_window_tokens is None:
            window = context_tokens
        else:
            window = min(context_tokens, self.sliding_window_tokens)
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
    if model_type in _VLLM_FLOAT32_STATE_MODEL_TYPES or arguments.engine == "sglang":
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
    attention_token_bytes = heads_per_gpu * kv_head_bytes(kv_dtype, shape.head_dim, shape.value_head_dim)
    # Layers TurboQuant leaves at the model's dtype, and what a token costs there.
    boundary = turboquant_boundary_layers(shape) if is_turboquant(kv_dtype) else frozenset()
    boundary_token_bytes = heads_per_gpu * kv_head_bytes(serving, shape.head_dim, shape.value_head_dim)
    mla_token_bytes = shape.mla_latent_dim * element_bytes
    state_dtype = _state_dtype(shape, model_type, arguments, serving) if shape.linear else None
    state_layer_bytes = 0.0
    if shape.linear is not None and state_dtype is not None:
        speculative = arguments.speculative_tokens if arguments.engine == "vllm" else 0
        conv = shape.linear.conv_state_elements(tensor_parallel, speculative)
        state_layer_bytes = conv * dtype_bytes(serving)
        state_layer_bytes += shape.linear.recurrent_state_elements(tensor_parallel) * dtype_bytes(
            state_dtype, 4
        )
    best = (0, 0, 0)
    counts = (0, 0, 0)
    for stage in stages or pipeline_stages(
        shape.layer_count, arguments.pipeline_parallel, engine=arguments.engine
    ):
        kinds = [shape.layer_kinds[index] for index in stage]
        protected = {
            kind: sum(1 for index in stage if index in boundary and shape.layer_kinds[index] == kind)
            for kind in ("full", "sliding")
        }
        extra = boundary_token_bytes - attention_token_bytes
        full = kinds.count("full") * attention_token_bytes + kinds.count("mla") * mla_token_bytes
        full += protected["full"] * extra
        sliding = kinds.count("sliding") * attention_token_bytes + protected["sliding"] * extra
        state = kinds.count("linear") * state_layer_bytes
        candidate = (math.ceil(full), math.ceil(sliding), math.ceil(state))
        if sum(candidate) > sum(best):
            best = candidate
            counts = (kinds.count("full") + kinds.count("mla"), kinds.count("linear"), kinds.count("sliding"))
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
        sliding_layer_count=counts[2],
        speculative_state_blocks=arguments.speculative_tokens if arguments.engine == "vllm" else 0,
    )
