"""The few engine flags that change memory, read from a deployment's backend parameters.

The parameters are read in their one parsed form (``modelyard.backends.parameters``, on the
engine version's flag table): both spellings (``--flag value``, ``--flag=value``), aliases,
vLLM's underscores and human-readable numbers (``32k``), ``--no-`` switches. Flags that do not
matter for memory are ignored here; checking them is ``modelyard.doctor``'s job.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from modelyard.backends.flag_tables import FlagTable, available_versions, load_flag_table
from modelyard.backends.parameters import ParsedParameters, parse_arguments, parse_backend_parameters
from modelyard.errors import InvalidInput

Engine = Literal["vllm", "sglang"]

# field name -> flags that set it, per engine.
_VLLM_FLAGS: dict[str, tuple[str, ...]] = {
    "tensor_parallel": ("--tensor-parallel-size", "-tp"),
    "pipeline_parallel": ("--pipeline-parallel-size", "-pp"),
    "context_tokens": ("--max-model-len",),
    "memory_fraction": ("--gpu-memory-utilization",),
    "kv_cache_dtype": ("--kv-cache-dtype",),
    "batched_tokens": ("--max-num-batched-tokens",),
    "max_sequences": ("--max-num-seqs",),
    "block_size": ("--block-size",),
    "dtype": ("--dtype",),
    "state_dtype": ("--mamba-ssm-cache-dtype",),
    "kv_cache_memory": ("--kv-cache-memory", "--kv-cache-memory-bytes"),
    "limit_mm_per_prompt": ("--limit-mm-per-prompt",),
    "speculative_config": ("--speculative-config",),
    "quantization": ("--quantization",),
    "encoder_tensor_parallel_mode": ("--mm-encoder-tp-mode",),
}
_SGLANG_FLAGS: dict[str, tuple[str, ...]] = {
    "tensor_parallel": ("--tp-size", "--tp", "--tensor-parallel-size"),
    "pipeline_parallel": ("--pp-size", "--pp", "--pipeline-parallel-size"),
    "context_tokens": ("--context-length",),
    "memory_fraction": ("--mem-fraction-static",),
    "kv_cache_dtype": ("--kv-cache-dtype",),
    "batched_tokens": ("--chunked-prefill-size",),
    "max_sequences": ("--max-running-requests",),
    "block_size": ("--page-size",),
    "dtype": ("--dtype",),
    "state_dtype": ("--mamba-ssm-dtype",),
    "max_total_tokens": ("--max-total-tokens",),
    "cuda_graph_max_batch": ("--cuda-graph-max-bs",),
    "speculative_algorithm": ("--speculative-algorithm", "--speculative-algo"),
    "draft_model_path": ("--speculative-draft-model-path", "--speculative-draft-model"),
    "quantization": ("--quantization",),
}
_VLLM_SWITCHES = {
    "enforce_eager": ("--enforce-eager",),
    "language_only": ("--language-model-only",),
    "encoder_data_parallel": ("--enable-multimodal-encoder-data-parallel",),
}
_SGLANG_SWITCHES = {
    "enforce_eager": ("--disable-cuda-graph",),
    "language_only": ("--language-only",),
    "encoder_data_parallel": ("--mm-enable-dp-encoder",),
}


@dataclass(frozen=True)
class EngineArguments:
    """Memory-relevant settings; ``None`` means the engine's default applies."""

    engine: Engine
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    context_tokens: int | None = None
    memory_fraction: float | None = None
    kv_cache_dtype: str | None = None
    batched_tokens: int | None = None
    max_sequences: int | None = None
    block_size: int | None = None
    dtype: str | None = None
    state_dtype: str | None = None
    kv_cache_memory_bytes: int | None = None
    max_total_tokens: int | None = None
    cuda_graph_max_batch: int | None = None
    enforce_eager: bool = False
    language_only: bool = False
    speculative_mtp: bool = False
    # ``num_speculative_tokens`` of --speculative-config: vLLM's hybrid models keep that many more
    # state blocks per sequence and conv-state columns per layer.
    speculative_tokens: int = 0
    # The draft model's directory (vLLM: the ``model`` of --speculative-config for a draft or EAGLE
    # method; SGLang: --speculative-draft-model-path): its weights and KV are added.
    draft_model_path: str | None = None
    # Prefix caching as given (None: the engine's default: on, except vLLM's hybrid models); with it
    # on, vLLM's hybrid models keep two state blocks per sequence.
    prefix_caching: bool | None = None
    # --quantization as given: on a checkpoint without quantization, the engine quantizes online.
    quantization: str | None = None
    # vLLM's --enable-chunked-prefill as given (None: the engine decides).
    chunked_prefill: bool | None = None
    # The vision encoder whole on every TP rank (vLLM --mm-encoder-tp-mode data, SGLang
    # --mm-enable-dp-encoder) instead of split by tensor parallelism.
    encoder_data_parallel: bool = False

    @property
    def memory_knob(self) -> str:
        return "--gpu-memory-utilization" if self.engine == "vllm" else "--mem-fraction-static"

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel


def _memory_bytes(flag: str, value: str | None) -> int:
    text = (value or "").strip().upper()
    scale = 1
    for suffix, factor in (("GIB", 1 << 30), ("G", 1 << 30), ("MIB", 1 << 20), ("M", 1 << 20)):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    try:
        return int(float(text) * scale)
    except ValueError:
        raise InvalidInput(f"{flag} needs a size, got {value!r}", hint=f"write e.g. {flag} 20G") from None


def engine_flag_table(engine: str, version: str | None) -> FlagTable | None:
    """The flag table the estimator reads ``engine``'s flags with: the version's (or the nearest),
    the newest one when no version is given."""
    versions = available_versions(engine)
    if not versions:
        return None
    return load_flag_table(engine, version or versions[-1])


def parsed_parameters(
    engine: str, parameters: Sequence[str] | ParsedParameters, version: str | None = None
) -> ParsedParameters:
    """``parameters`` in parsed form: lines as typed are split by shell rules (``InvalidInput`` on
    a quote left open); a parsed form is kept (parsed again on the engine's table if it had none)."""
    if isinstance(parameters, ParsedParameters):
        if parameters.table is not None or engine not in ("vllm", "sglang"):
            return parameters
        return parse_arguments(parameters.argv, engine_flag_table(engine, version))
    return parse_backend_parameters(list(parameters), engine_flag_table(engine, version)).require_split()


def parse_engine_arguments(
    engine: str, parameters: Sequence[str] | ParsedParameters, version: str | None = None
) -> EngineArguments:
    """Read the memory-relevant flags of ``engine`` ("vllm" or "sglang") from ``parameters``:
    lines as typed (each split by shell rules), or the parsed form (``backends.parameters``)."""
    if engine not in ("vllm", "sglang"):
        raise InvalidInput(
            f"the estimator models vllm and sglang, not {engine!r}", hint="use --backend vllm|sglang"
        )
    parsed = parsed_parameters(engine, parameters, version)
    flags = _VLLM_FLAGS if engine == "vllm" else _SGLANG_FLAGS
    switches = _VLLM_SWITCHES if engine == "vllm" else _SGLANG_SWITCHES
    integers = {"tensor_parallel", "pipeline_parallel", "context_tokens", "batched_tokens", "max_sequences"}
    integers |= {"block_size", "max_total_tokens", "cuda_graph_max_batch"}
    result: dict[str, object] = {"engine": engine}
    for field_name, names in flags.items():
        option = parsed.find(*names)
        if option is None:
            continue
        value = parsed.value_of(*names)
        if field_name in integers:
            result[field_name] = parsed.integer(*names)
        elif field_name == "memory_fraction":
            fraction = parsed.number(*names)
            assert fraction is not None
            if not 0 < fraction <= 1:
                raise InvalidInput(f"{option.name} must be between 0 and 1, got {fraction}")
            result[field_name] = fraction
        elif field_name == "kv_cache_memory":
            result["kv_cache_memory_bytes"] = _memory_bytes(option.name, value)
        elif field_name == "limit_mm_per_prompt":
            result["language_only"] = _all_zero(value)
        elif field_name == "speculative_config":
            result["speculative_mtp"] = "mtp" in (value or "").lower()
            result["speculative_tokens"] = _speculative_tokens(value)
            result["draft_model_path"] = _vllm_draft_model(value)
        elif field_name == "encoder_tensor_parallel_mode":
            result["encoder_data_parallel"] = (value or "").strip().lower() == "data"
        elif field_name == "speculative_algorithm":
            result["speculative_mtp"] = (value or "").upper() in {"EAGLE", "NEXTN", "EAGLE3", "MTP"}
        elif field_name == "draft_model_path":
            result["draft_model_path"] = (value or "").strip() or None
        else:
            result[field_name] = value
    if result.get("draft_model_path"):
        # A draft of its own: the model's MTP layers are not what speculates.
        result["speculative_mtp"] = False
    for field_name, names in switches.items():
        if parsed.switch(*names):
            result[field_name] = True
    if engine == "vllm":
        result["chunked_prefill"] = parsed.switch("--enable-chunked-prefill")
    prefix_caching = parsed.switch("--enable-prefix-caching")
    if prefix_caching is not None:
        result["prefix_caching"] = prefix_caching
    if parsed.given("--disable-radix-cache"):
        result["prefix_caching"] = False
    return EngineArguments(**result)  # type: ignore[arg-type]


def _speculative_tokens(value: str | None) -> int:
    try:
        config = json.loads(value or "")
    except json.JSONDecodeError:
        return 0
    tokens = config.get("num_speculative_tokens") if isinstance(config, dict) else None
    return tokens if isinstance(tokens, int) and tokens > 0 else 0


# vLLM methods that name no draft model of their own (``model`` then means the target's MTP).
_VLLM_METHODS_WITHOUT_DRAFT = {"ngram", "suffix", "mtp", "deepseek_mtp", "qwen3_next_mtp", "medusa"}


def _vllm_draft_model(value: str | None) -> str | None:
    """The draft's directory in --speculative-config (None: no draft model, e.g. ngram or MTP)."""
    try:
        config = json.loads(value or "")
    except json.JSONDecodeError:
        return None
    if not isinstance(config, dict):
        return None
    method = str(config.get("method") or "").lower()
    model = config.get("model")
    if (
        method in _VLLM_METHODS_WITHOUT_DRAFT
        or "mtp" in method
        or not isinstance(model, str)
        or not model.strip()
    ):
        return None
    return model.strip()


def _all_zero(value: str | None) -> bool:
    """``--limit-mm-per-prompt '{"image": 0, "video": 0}'`` turns the encoder off."""
    try:
        limits = json.loads(value or "")
    except json.JSONDecodeError:
        return False
    return isinstance(limits, dict) and bool(limits) and all(limit == 0 for limit in limits.values())
