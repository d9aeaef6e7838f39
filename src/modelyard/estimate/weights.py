"""Weight bytes: per part of the model (from safetensors headers, else from config.json), and per
GPU under tensor and pipeline parallelism.

From headers the bytes are exact, whatever the quantisation. From config.json alone the parameter
count of each part is computed from the shape and multiplied by the bytes per parameter that the
declared dtype and ``quantization_config`` imply (embeddings and head stay at the model dtype).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from modelyard.estimate.architecture import ModelShape
from modelyard.modeldir import WeightSummary

DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "int8": 1,
    "fp4": 0.5,
}


def dtype_bytes(dtype: str | None, default: float = 2) -> float:
    if dtype is None:
        return default
    return DTYPE_BYTES.get(dtype.lower().removeprefix("torch."), default)


def quantized_bytes_per_parameter(quantization: dict[str, Any] | None, model_dtype_bytes: float) -> float:
    """Bytes per parameter of the quantised linear layers, scales included (roughly)."""
    if not quantization:
        return model_dtype_bytes
    method = str(quantization.get("quant_method") or quantization.get("quant_algo") or "").lower()
    bits = quantization.get("bits") or quantization.get("w_bit")
    group_size = quantization.get("group_size") or quantization.get("q_group_size") or 128
    if method in {"fp8", "fbgemm_fp8", "ptpc_fp8"}:
        return 1.0
    if method in {"mxfp4"}:
        return 0.5 + 1 / 32
    if method in {"nvfp4", "modelopt_fp4"} or "fp4" in method:
        return 0.5 + 1 / 16
    if method == "modelopt":
        algo = str(quantization.get("quant_algo", "")).lower()
        return 0.5 + 1 / 16 if "fp4" in algo else 1.0
    if method == "compressed-tensors":
        groups = quantization.get("config_groups") or {}
        for group in groups.values() if isinstance(groups, dict) else []:
            weights = group.get("weights") if isinstance(group, dict) else None
            if isinstance(weights, dict) and isinstance(weights.get("num_bits"), int):
                size = weights.get("group_size") or 128
                return float(weights["num_bits"]) / 8 + (2 / size if weights["num_bits"] < 8 else 0)
        return 1.0
    if method == "bitsandbytes":
        return 0.5 + 1 / 64 if quantization.get("load_in_4bit") else 1.0
    if isinstance(bits, int):
        return bits / 8 + 2 * 2 / max(int(group_size) if isinstance(group_size, int) else 128, 1)
    return model_dtype_bytes


@dataclass(frozen=True)
class WeightParts:
    """Bytes of each part of the model: per decoder layer, embeddings, head, encoder, MTP, rest."""

    layer_bytes: dict[int, int]
    embedding_bytes: int
    head_bytes: int
    encoder_bytes: int
    mtp_bytes: int
    other_bytes: int
    # "headers" when read from safetensors headers, "config" when computed from config.json.
    source: str
    # The routed experts' share of each MoE layer's bytes (split over the MoE ranks, not TP).
    expert_bytes: dict[int, int] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return (
            sum(self.layer_bytes.values())
            + self.embedding_bytes
            + self.head_bytes
            + self.encoder_bytes
            + self.mtp_bytes
            + self.other_bytes
        )


def expert_share(shape: ModelShape, index: int) -> float:
    """The routed experts' share of layer ``index``'s parameters (0 for dense layers)."""
    if not shape.is_moe or index in shape.dense_layer_indices:
        return 0.0
    experts = shape.expert_count * 3 * shape.hidden_size * shape.expert_intermediate_size
    attention = shape.attention_parameters.get(
        shape.layer_kinds[index] if index < shape.layer_count else "full", 0
    )
    return experts / max(1, _mlp_parameters(shape, index) + attention)


def parts_from_headers(summary: WeightSummary, shape: ModelShape | None = None) -> WeightParts:
    """The checkpoint's bytes by part; with the ``shape``, each MoE layer's routed-expert share is
    split off by its parameter share (headers do not say which bytes are experts)."""
    experts = (
        {index: int(size * expert_share(shape, index)) for index, size in summary.layer_bytes.items()}
        if shape is not None and shape.is_moe
        else {}
    )
    return WeightParts(
        layer_bytes=dict(summary.layer_bytes),
        embedding_bytes=summary.embedding_bytes,
        head_bytes=summary.head_bytes,
        encoder_bytes=summary.encoder_bytes,
        mtp_bytes=summary.mtp_bytes,
        other_bytes=summary.other_bytes,
        source="headers",
        expert_bytes={index: size for index, size in experts.items() if size},
    )


def _mlp_parameters(shape: ModelShape, index: int) -> int:
    hidden = shape.hidden_size
    if index in shape.dense_layer_indices or not shape.is_moe:
        return 3 * hidden * shape.intermediate_size
    experts = shape.expert_count * 3 * hidden * shape.expert_intermediate_size
    shared = 3 * hidden * shape.shared_expert_intermediate_size
    return experts + shared + hidden * shape.expert_count


def parts_from_config(
    shape: ModelShape, model_dtype: str | None, quantization: dict[str, Any] | None
) -> WeightParts:
    """Weight bytes computed from the shape: for models whose weights are not here."""
    base = dtype_bytes(model_dtype)
    linear_bytes = quantized_bytes_per_parameter(quantization, base)
    layer_bytes: dict[int, int] = {}
    expert_bytes: dict[int, int] = {}
    for index, kind in enumerate(shape.layer_kinds):
        attention = shape.attention_parameters.get(kind, shape.attention_parameters.get("full", 0))
        parameters = attention + _mlp_parameters(shape, index)
        layer_bytes[index] = int(parameters * linear_bytes + 2 * shape.hidden_size * base)
        if shape.is_moe and index not in shape.dense_layer_indices:
            routed = shape.expert_count * 3 * shape.hidden_size * shape.expert_intermediate_size
            expert_bytes[index] = int(routed * linear_bytes)
    embedding = int(shape.vocabulary_size * shape.hidden_size * base)
    head = 0 if shape.tie_word_embeddings else embedding
    mtp_layer = (
        shape.attention_parameters.get("full", 0)
        + _mlp_parameters(shape, shape.layer_count)
        + 2 * shape.hidden_size**2
    )
    return WeightParts(
        layer_bytes=layer_bytes,
        embedding_bytes=embedding,
        head_bytes=head,
        encoder_bytes=int(shape.encoder_parameter_count * base),
        mtp_bytes=int(shape.mtp_layer_count * mtp_layer * linear_bytes),
        other_bytes=int(shape.hidden_size * base),
        source="config",
        expert_bytes=expert_bytes,
    )


def pipeline_stages(
    layer_count: int, pipeline_parallel: int, stage_layers: tuple[int, ...] | None = None
) -> list[range]:
    """Layers per pipeline stage, split as evenly as the engines do (earlier stages get fewer), or
    as ``stage_layers`` (vLLM's ``VLLM_PP_LAYER_PARTITION``) place them when they add up."""
    if stage_layers and len(stage_layers) == pipeline_parallel and sum(stage_layers) == layer_count:
        placed: list[range] = []
        first = 0
        for size in stage_layers:
            placed.append(range(first, first + size))
            first += size
        return placed
    base, remainder = divmod(layer_count, pipeline_parallel)
    stages: list[range] = []
    start = 0
    for stage in range(pipeline_parallel):
        size = base + (1 if stage >= pipeline_parallel - remainder else 0)
        stages.append(range(start, start + size))
        start += size
    return stages


def weight_bytes_per_gpu(
    parts: WeightParts,
    layer_count: int,
    tensor_parallel: int,
    pipeline_parallel: int,
    *,
    load_encoder: bool,
    load_mtp: bool,
    moe_ranks: int | None = None,
    stage_layers: tuple[int, ...] | None = None,
) -> int:
    """The largest weight share any one GPU holds: layers of its stage, over TP ranks (routed
    experts over the ``moe_ranks``: TP x DP on vLLM, expert parallel or not); embeddings on the
    first stage, head on the last (both vocabulary-parallel); encoder and MTP when loaded."""
    largest = 0
    experts_over = moe_ranks or tensor_parallel
    stages = pipeline_stages(layer_count, pipeline_parallel, stage_layers)
    for number, stage in enumerate(stages):
        first, last = number == 0, number == len(stages) - 1
        routed = sum(parts.expert_bytes.get(index, 0) for index in stage)
        stage_bytes = sum(parts.layer_bytes.get(index, 0) for index in stage) - routed
        stage_bytes += math.ceil(routed * tensor_parallel / experts_over)
        if first:
            stage_bytes += parts.embedding_bytes + (parts.encoder_bytes if load_encoder else 0)
        if last:
            stage_bytes += parts.head_bytes + parts.other_bytes + (parts.mtp_bytes if load_mtp else 0)
            if parts.head_bytes == 0 and pipeline_parallel > 1:
                stage_bytes += parts.embedding_bytes  # a tied head is a copy of the embeddings
        largest = max(largest, math.ceil(stage_bytes / tensor_parallel))
    return largest
