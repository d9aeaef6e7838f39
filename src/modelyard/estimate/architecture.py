"""A model's shape as the memory estimator needs it, read from config.json alone.

No model class is imported: the fields are the ones Hugging Face configs spell the same way across
families (``num_key_value_heads``, ``head_dim``, ``layer_types``, ...), so new architectures work
on day 0 as long as they keep those names. What each layer keeps per token or per sequence:

- ``full`` attention: K and V for every token;
- ``sliding`` attention: K and V for at most ``sliding_window`` tokens;
- ``linear`` attention (Qwen3-Next, Qwen3.5/3.6 Gated DeltaNet, Mamba): a fixed state per sequence;
- ``mla`` (DeepSeek V2/V3, Kimi K2): one compressed latent per token, shared by all heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

LayerKind = Literal["full", "sliding", "linear", "mla"]
_OUTPUT_GATE_MODEL_TYPE_PREFIXES = ("qwen3_next", "qwen3_5", "qwen3_6")

_LINEAR_NAMES = {"linear_attention", "mamba", "mamba2", "gated_delta_net", "deltanet", "kda", "linear"}
_SLIDING_NAMES = {"sliding_attention", "sliding_window", "local_attention", "chunked_attention"}


def _int(config: dict[str, Any], *names: str, default: int = 0) -> int:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


@dataclass(frozen=True)
class LinearAttentionShape:
    """Gated DeltaNet dimensions (Qwen3-Next / Qwen3.5 names)."""

    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    @property
    def conv_channels(self) -> int:
        return 2 * self.key_heads * self.key_head_dim + self.value_heads * self.value_head_dim

    def conv_state_elements(self, tensor_parallel: int, speculative_tokens: int = 0) -> int:
        """The convolution state keeps ``conv_kernel - 1`` columns, and one more per speculative
        token (vLLM's ``gated_delta_net_state_shape(num_spec=...)``)."""
        return (self.conv_kernel - 1 + speculative_tokens) * self.conv_channels // tensor_parallel

    def recurrent_state_elements(self, tensor_parallel: int) -> int:
        return self.value_heads * self.key_head_dim * self.value_head_dim // tensor_parallel


@dataclass(frozen=True)
class ModelShape:
    """Everything the estimator reads from config.json (the text model's part of it)."""

    hidden_size: int
    layer_kinds: tuple[LayerKind, ...]
    attention_heads: int
    key_value_heads: int
    head_dim: int
    value_head_dim: int
    vocabulary_size: int
    intermediate_size: int
    tie_word_embeddings: bool
    sliding_window_tokens: int | None = None
    mla_latent_dim: int = 0
    linear: LinearAttentionShape | None = None
    expert_count: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    dense_layer_indices: frozenset[int] = field(default_factory=frozenset)
    mtp_layer_count: int = 0
    max_position_embeddings: int | None = None
    # Declared dtype of linear-attention recurrent state (config ``mamba_ssm_dtype``), if any.
    state_dtype: str | None = None
    encoder_parameter_count: int = 0
    # Attention parameters of one layer of each kind (MLA's depend on its LoRA ranks).
    attention_parameters: dict[str, int] = field(default_factory=dict)

    @property
    def layer_count(self) -> int:
        return len(self.layer_kinds)

    def count(self, kind: LayerKind) -> int:
        return sum(1 for layer in self.layer_kinds if layer == kind)

    @property
    def is_hybrid_linear(self) -> bool:
        return self.count("linear") > 0

    @property
    def is_moe(self) -> bool:
        return self.expert_count > 0


def _layer_kinds(text: dict[str, Any], layers: int, is_mla: bool) -> tuple[LayerKind, ...]:
    declared = text.get("layer_types")
    if isinstance(declared, list) and len(declared) >= layers:
        kinds: list[LayerKind] = []
        for name in declared[:layers]:
            lowered = str(name).lower()
            if lowered in _LINEAR_NAMES:
                kinds.append("linear")
            elif lowered in _SLIDING_NAMES:
                kinds.append("sliding")
            else:
                kinds.append("mla" if is_mla else "full")
        return tuple(kinds)
    interval = _int(text, "full_attention_interval")
    if interval > 0:
        return tuple("full" if (index + 1) % interval == 0 else "linear" for index in range(layers))
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) >= layers:
        # Nemotron-H: "M" Mamba, "*" attention, "-" MLP only (no cache).
        return tuple("full" if char == "*" else "linear" for char in pattern[:layers] if char in "M*")
    if is_mla:
        return tuple("mla" for _ in range(layers))
    window = text.get("sliding_window")
    uses_window = text.get("use_sliding_window", True) and isinstance(window, int) and window > 0
    max_window_layers = text.get("max_window_layers")
    if uses_window and text.get("model_type") in {"qwen2", "qwen3", "qwen2_moe", "qwen3_moe"}:
        # Qwen2/3 apply the window only to layers at or above max_window_layers.
        limit = max_window_layers if isinstance(max_window_layers, int) else layers
        return tuple("full" if index < limit else "sliding" for index in range(layers))
    # Gemma 2/3, Cohere2: every ``sliding_window_pattern``-th layer is full attention, the others
    # sliding (transformers derives ``layer_types`` so when the config has none; Gemma 2: 2).
    every = text.get("sliding_window_pattern")
    if not isinstance(every, int) and text.get("model_type") == "gemma2":
        every = 2
    if uses_window and isinstance(every, int) and every > 1:
        return tuple("sliding" if (index + 1) % every else "full" for index in range(layers))
    if uses_window:
        return tuple("sliding" for _ in range(layers))
    return tuple("full" for _ in range(layers))


def _dense_layers(text: dict[str, Any], layers: int, experts: int) -> frozenset[int]:
    if experts == 0:
        return frozenset(range(layers))
    dense: set[int] = set()
    first_dense = _int(text, "first_k_dense_replace")
    dense.update(range(min(first_dense, layers)))
    only_mlp = text.get("mlp_only_layers")
    if isinstance(only_mlp, list):
        dense.update(int(index) for index in only_mlp if isinstance(index, int))
    step = _int(text, "decoder_sparse_step", default=1)
    if step > 1:
        dense.update(index for index in range(layers) if (index + 1) % step != 0)
    return frozenset(dense)


def _encoder_parameters(config: dict[str, Any]) -> int:
    """A rough count for the vision/audio encoder, from its config (ViT: ~12 h^2 per layer)."""
    total = 0
    for key in ("vision_config", "audio_config"):
        sub = config.get(key)
        if not isinstance(sub, dict):
            continue
        hidden = _int(sub, "hidden_size", "embed_dim", "d_model", "width")
        depth = _int(sub, "depth", "num_hidden_layers", "num_layers", "encoder_layers")
        intermediate = _int(sub, "intermediate_size", "mlp_dim", "encoder_ffn_dim", default=4 * hidden)
        total += depth * (4 * hidden * hidden + 2 * hidden * intermediate)
        total += hidden * _int(sub, "out_hidden_size", "projection_dim", default=hidden) * 2
    return total


def read_model_shape(config: dict[str, Any]) -> ModelShape:
    """The shape of ``config`` (a config.json dict; multimodal configs use their ``text_config``)."""
    nested = config.get("text_config") or config.get("llm_config")
    text = {**config, **nested} if isinstance(nested, dict) else config
    hidden = _int(text, "hidden_size", "d_model", "n_embd")
    layers = _int(text, "num_hidden_layers", "num_layers", "n_layer")
    heads = _int(text, "num_attention_heads", "n_head", default=1)
    kv_heads = _int(text, "num_key_value_heads", "num_kv_heads", "multi_query_group_num", default=heads)
    head_dim = _int(text, "head_dim", default=hidden // max(heads, 1))
    kv_lora = _int(text, "kv_lora_rank")
    is_mla = kv_lora > 0
    experts = _int(text, "num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
    linear: LinearAttentionShape | None = None
    if _int(text, "linear_num_value_heads") > 0:
        linear = LinearAttentionShape(
            key_heads=_int(text, "linear_num_key_heads"),
            value_heads=_int(text, "linear_num_value_heads"),
            key_head_dim=_int(text, "linear_key_head_dim", default=128),
            value_head_dim=_int(text, "linear_value_head_dim", default=128),
            conv_kernel=_int(text, "linear_conv_kernel_dim", default=4),
        )
    window = text.get("sliding_window")
    attention = _attention_parameters(text, hidden, heads, kv_heads, head_dim, linear)
    state_dtype = text.get("mamba_ssm_dtype") or config.get("mamba_ssm_dtype")
    return ModelShape(
        hidden_size=hidden,
        layer_kinds=_layer_kinds(text, layers, is_mla),
        attention_heads=heads,
        key_value_heads=kv_heads,
        head_dim=head_dim,
        value_head_dim=_int(text, "v_head_dim", default=head_dim),
        vocabulary_size=_int(text, "vocab_size", "padded_vocab_size"),
        intermediate_size=_int(text, "intermediate_size", "ffn_hidden_size", default=4 * hidden),
        tie_word_embeddings=bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        sliding_window_tokens=window if isinstance(window, int) and window > 0 else None,
        mla_latent_dim=kv_lora + _int(text, "qk_rope_head_dim") if is_mla else 0,
        linear=linear,
        expert_count=experts,
        experts_per_token=_int(text, "num_experts_per_tok", "moe_topk", "top_k"),
        expert_intermediate_size=_int(text, "moe_intermediate_size", default=_int(text, "intermediate_size")),
        shared_expert_intermediate_size=_int(text, "shared_expert_intermediate_size")
        or _int(text, "n_shared_experts") * _int(text, "moe_intermediate_size"),
        dense_layer_indices=_dense_layers(text, layers, experts),
        mtp_layer_count=_int(text, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers"),
        max_position_embeddings=_int(text, "max_position_embeddings", "seq_length") or None,
        state_dtype=str(state_dtype) if state_dtype else None,
        encoder_parameter_count=_encoder_parameters(config),
        attention_parameters=attention,
    )


def _attention_parameters(
    text: dict[str, Any],
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    linear: LinearAttentionShape | None,
) -> dict[str, int]:
    value_dim = _int(text, "v_head_dim", default=head_dim)
    standard = (
        hidden * heads * head_dim + hidden * kv_heads * (head_dim + value_dim) + heads * value_dim * hidden
    )
    # Qwen3-Next / Qwen3.5 / 3.6 gate the attention output: q_proj also yields the gate, one more
    # heads x head_dim per token (transformers' default ``attn_output_gate=True`` for them).
    gate = text.get("attn_output_gate")
    if gate is None:
        gate = str(text.get("model_type", "")).startswith(_OUTPUT_GATE_MODEL_TYPE_PREFIXES)
    if gate:
        standard += hidden * heads * head_dim
    counts = {"full": standard, "sliding": standard}
    kv_lora = _int(text, "kv_lora_rank")
    if kv_lora:
        rope = _int(text, "qk_rope_head_dim")
        nope = _int(text, "qk_nope_head_dim", default=head_dim)
        q_lora = _int(text, "q_lora_rank")
        query = hidden * q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
        counts["mla"] = (
            query
            + hidden * (kv_lora + rope)
            + kv_lora * heads * (nope + value_dim)
            + (heads * value_dim * hidden)
        )
    if linear is not None:
        projections = (
            2 * linear.key_heads * linear.key_head_dim + 2 * linear.value_heads * linear.value_head_dim
        )
        counts["linear"] = (
            hidden * projections
            + hidden * 2 * linear.value_heads
            + linear.conv_channels * linear.conv_kernel
            + linear.value_heads * linear.value_head_dim * hidden
        )
    return counts
