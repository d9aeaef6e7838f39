"""The few engine flags that change memory, read from a deployment's backend parameters.

Both spellings are read (``--flag value`` and ``--flag=value``), with each engine's aliases. Flags
that do not matter for memory are ignored here; checking them is ``modelyard.doctor``'s job.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from modelyard.errors import InvalidInput

Engine = Literal["vllm", "sglang"]

# ``--flag={...}`` or ``--flag=[...]``: one token even with spaces inside.
_JSON_ASSIGNMENT = re.compile(r"^--[\w-]+=[\[{]")

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
}
_VLLM_SWITCHES = {"enforce_eager": ("--enforce-eager",), "language_only": ("--language-model-only",)}
_NEGATIVE_SWITCHES = {"prefix_caching": ("--no-enable-prefix-caching", "--disable-radix-cache")}
_SGLANG_SWITCHES = {"enforce_eager": ("--disable-cuda-graph",), "language_only": ("--language-only",)}


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
    # vLLM prefix caching (on by default); hybrid models then keep two state blocks per sequence.
    prefix_caching: bool = True

    @property
    def memory_knob(self) -> str:
        return "--gpu-memory-utilization" if self.engine == "vllm" else "--mem-fraction-static"

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel


def _split(parameters: Sequence[str]) -> list[str]:
    """Tokens from parameters given either as a line of flags (``"--tp 2 --x y"``, split with
    shell rules) or already split (a JSON value with spaces stays one token)."""
    tokens: list[str] = []
    for item in parameters:
        text = item.strip()
        is_line = text.startswith("-") and any(char.isspace() for char in text)
        if is_line and not _JSON_ASSIGNMENT.match(text):
            try:
                tokens.extend(shlex.split(text))
            except ValueError as error:
                raise InvalidInput(f"cannot split backend parameters {item!r}: {error}") from error
        elif text:
            tokens.append(text)
    return tokens


def _values(tokens: list[str]) -> dict[str, str | None]:
    """``{flag: value}`` for every ``--flag`` (the last one wins); switches map to ``None``."""
    found: dict[str, str | None] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.startswith("-"):
            if "=" in token:
                flag, value = token.split("=", 1)
                found[flag.replace("_", "-")] = value
            elif index + 1 < len(tokens) and not tokens[index + 1].startswith("--"):
                found[token.replace("_", "-")] = tokens[index + 1]
                index += 1
            else:
                found[token.replace("_", "-")] = None
        index += 1
    return found


def _number(flag: str, value: str | None, kind: type[int] | type[float]) -> int | float:
    try:
        if value is None:
            raise ValueError("no value")
        return kind(value)
    except ValueError as error:
        raise InvalidInput(
            f"{flag} needs a {'whole number' if kind is int else 'number'}, got {value!r}",
            hint=f"write e.g. {flag} {'2' if kind is int else '0.9'}",
        ) from error


def _memory_bytes(flag: str, value: str | None) -> int:
    text = (value or "").strip().upper()
    scale = 1
    for suffix, factor in (("GIB", 1 << 30), ("G", 1 << 30), ("MIB", 1 << 20), ("M", 1 << 20)):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    return int(_number(flag, text, float) * scale)


def parse_engine_arguments(engine: str, parameters: Sequence[str]) -> EngineArguments:
    """Read the memory-relevant flags of ``engine`` ("vllm" or "sglang") from ``parameters``."""
    if engine not in ("vllm", "sglang"):
        raise InvalidInput(
            f"the estimator models vllm and sglang, not {engine!r}", hint="use --backend vllm|sglang"
        )
    flags = _VLLM_FLAGS if engine == "vllm" else _SGLANG_FLAGS
    switches = _VLLM_SWITCHES if engine == "vllm" else _SGLANG_SWITCHES
    values = _values(_split(parameters))
    settings: dict[str, object] = {}
    for field_name, names in flags.items():
        for name in names:
            if name in values:
                settings[field_name] = (name, values[name])
    integers = {"tensor_parallel", "pipeline_parallel", "context_tokens", "batched_tokens", "max_sequences"}
    integers |= {"block_size", "max_total_tokens", "cuda_graph_max_batch"}
    result: dict[str, object] = {"engine": engine}
    for field_name, (flag, value) in (
        (key, value) for key, value in settings.items() if isinstance(value, tuple)
    ):
        if field_name in integers:
            result[field_name] = int(_number(flag, value, int))
        elif field_name == "memory_fraction":
            fraction = float(_number(flag, value, float))
            if not 0 < fraction <= 1:
                raise InvalidInput(f"{flag} must be between 0 and 1, got {fraction}")
            result[field_name] = fraction
        elif field_name == "kv_cache_memory":
            result["kv_cache_memory_bytes"] = _memory_bytes(flag, value)
        elif field_name == "limit_mm_per_prompt":
            result["language_only"] = _all_zero(value)
        elif field_name == "speculative_config":
            result["speculative_mtp"] = "mtp" in (value or "").lower()
        elif field_name == "speculative_algorithm":
            result["speculative_mtp"] = (value or "").upper() in {"EAGLE", "NEXTN", "EAGLE3", "MTP"}
        else:
            result[field_name] = value
    for field_name, names in switches.items():
        if any(name in values for name in names):
            result[field_name] = True
    for field_name, names in _NEGATIVE_SWITCHES.items():
        if any(name in values for name in names):
            result[field_name] = False
    return EngineArguments(**result)  # type: ignore[arg-type]


def _all_zero(value: str | None) -> bool:
    """``--limit-mm-per-prompt '{"image": 0, "video": 0}'`` turns the encoder off."""
    try:
        limits = json.loads(value or "")
    except json.JSONDecodeError:
        return False
    return isinstance(limits, dict) and bool(limits) and all(limit == 0 for limit in limits.values())
