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
    # The attention projections' share of each layer's bytes (split over the attention TP group,
    # which SGLang's DP attention makes smaller than TP).
    attention_bytes: dict[int, int] = field(default_factory=dict)

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


def attention_share(shape: ModelShape, index: int) -> float:
    """The attention projections' share of layer ``index``'s parameters."""
    kind = shape.layer_kinds[index] if index < shape.layer_count else "full"
    attention = shape.attention_parameters.get(kind, shape.attention_parameters.get("full", 0))
    return attention / max(1, _mlp_parameters(shape, index) + attention)


def parts_from_headers(summary: WeightSummary, shape: ModelShape | None = None) -> WeightParts:
    """The checkpoint's bytes by part; with the ``shape``, each MoE layer's routed-expert share and
    each layer's attention share are split off by their parameter shares (headers do not say which
    bytes are experts or attention)."""
    experts = (
        {index: int(size * expert_share(shape, index)) for index, size in summary.layer_bytes.items()}
        if shape is not None and shape.is_moe
        else {}
    )
    attention = (
        {index: int(size * attention_share(shape, index)) for index, size in summary.layer_bytes.items()}
        if shape is not None
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
        attention_bytes={index: size for index, size in attention.items() if size},
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
    attention_bytes: dict[int, int] = {}
    for index, kind in enumerate(shape.layer_kinds):
        attention = shape.attention_parameters.get(kind, shape.attention_parameters.get("full", 0))
        parameters = attention + _mlp_parameters(shape, index)
        layer_bytes[index] = int(parameters * linear_bytes + 2 * shape.hidden_size * base)
        attention_bytes[index] = int(attention * linear_bytes)
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
        attention_bytes=attention_bytes,
    )


def pipeline_stages(
    layer_count: int,
    pipeline_parallel: int,
    stage_layers: tuple[int, ...] | None = None,
    engine: str = "vllm",
) -> list[range]:
    """Layers per pipeline stage as the engine splits them, or as ``stage_layers`` (vLLM's
    ``VLLM_PP_LAYER_PARTITION``, SGLang's ``SGLANG_PP_LAYER_PARTITION``) place them when they add up.

    Both give every stage ``layers // PP`` and spread the remainder one layer a stage, but not on
    the same stages: vLLM's ``get_pp_indices`` (vllm/distributed/utils.py) adds them to the stages
    before the last one, from the second-to-last backwards (30 layers on 4 stages: 7, 8, 8, 7), to
    keep them off the stages that hold the embeddings and the head; SGLang's gives them to the last
    stages (7, 7, 8, 8)."""
    if stage_layers and len(stage_layers) == pipeline_parallel and sum(stage_layers) == layer_count:
        sizes = list(stage_layers)
    else:
        base, remainder = divmod(layer_count, pipeline_parallel)
        sizes = [base] * pipeline_parallel
        if engine == "vllm":
            for offset in range(2, remainder + 2):
                sizes[-offset] += 1
        else:
            for offset in range(1, remainder + 1):
                sizes[-offset] += 1
    placed: list[range] = []
    first = 0
    for size in sizes:
        placed.append(range(first, first + size))
        first += size
    return placed


def weight_bytes_per_stage(
    parts: WeightParts,
    layer_count: int,
    tensor_parallel: int,
    pipeline_parallel: int,
    *,
    load_encoder: bool,
    load_mtp: bool,
    moe_ranks: int | None = None,
    stage_layers: tuple[int, ...] | None = None,
    attention_tensor_parallel: int | None = None,
    replicate_embeddings: bool = False,
    engine: str = "vllm",
    replicate_encoder: bool = False,
) -> list[int]:
    """The weight bytes one GPU of each pipeline stage holds: layers of its stage over TP ranks
    (routed experts over the ``moe_ranks``: TP x DP on vLLM, expert parallel or not; attention
    over ``attention_tensor_parallel``, TP / DP under SGLang's DP attention); embeddings on the
    first stage, head on the last (both vocabulary-parallel, the embeddings whole with
    ``replicate_embeddings``: SGLang's DP attention builds them with ``enable_tp=False``); encoder
    and MTP when loaded, the encoder whole on every rank with ``replicate_encoder`` (vLLM's
    ``--mm-encoder-tp-mode data``)."""
    experts_over = moe_ranks or tensor_parallel
    attention_over = attention_tensor_parallel or tensor_parallel
    stages = pipeline_stages(layer_count, pipeline_parallel, stage_layers, engine)
    shares: list[int] = []
    for number, stage in enumerate(stages):
        first, last = number == 0, number == len(stages) - 1
        routed = sum(parts.expert_bytes.get(index, 0) for index in stage)
        attention = sum(parts.attention_bytes.get(index, 0) for index in stage)
        split = sum(parts.layer_bytes.get(index, 0) for index in stage) - routed - attention
        whole = 0.0  # bytes every GPU of the stage holds in full
        if first and load_encoder:
            if replicate_encoder:
                whole += parts.encoder_bytes
            else:
                split += parts.encoder_bytes
        if first:
            if replicate_embeddings:
                whole += parts.embedding_bytes
            else:
                split += parts.embedding_bytes
        if last:
            split += parts.head_bytes + parts.other_bytes + (parts.mtp_bytes if load_mtp else 0)
            if parts.head_bytes == 0 and pipeline_parallel > 1:
                split += parts.embedding_bytes  # a tied head is a copy of the embeddings
        share = split / tensor_parallel + routed / experts_over + attention / attention_over + whole
        shares.append(math.ceil(share))
    return shares


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
    attention_tensor_parallel: int | None = None,
    replicate_embeddings: bool = False,
    engine: str = "vllm",
    replicate_encoder: bool = False,
) -> int:
    """The largest weight share any one GPU holds (``weight_bytes_per_stage``'s largest)."""
    return max(
        weight_bytes_per_stage(
            parts,
            layer_count,
            tensor_parallel,
            pipeline_parallel,
            load_encoder=load_encoder,
            load_mtp=load_mtp,
            moe_ranks=moe_ranks,
            stage_layers=stage_layers,
            attention_tensor_parallel=attention_tensor_parallel,
            replicate_embeddings=replicate_embeddings,
            engine=engine,
            replicate_encoder=replicate_encoder,
        )
    )
