"""Read the KV-cache lines of real vLLM and SGLang startup logs (the estimator's test fixtures)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).parent / "fixtures"
GIB = 1 << 30

_VLLM_MEMORY = (
    re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    re.compile(r"kv_cache_size=([\d.]+)GiB"),
)
_VLLM_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_VLLM_BLOCKS = re.compile(r"GPU blocks: (\d+)")
_VLLM_CONTEXT = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request")
_SGLANG_KV = re.compile(r"KV Cache is allocated\. #tokens: (\d+), K size: ([\d.]+) GB, V size: ([\d.]+) GB")
_SGLANG_STATE = re.compile(r"conv_state size: ([\d.]+) ?GB, ssm_state size: ([\d.]+) ?GB")
# vLLM V0 (before 0.7) paged the cache in 16-token blocks and logged the block count.
VLLM_V0_BLOCK_TOKENS = 16


@dataclass(frozen=True)
class LoggedKvCache:
    """What the engine logged: the memory it gave the KV cache (and recurrent state) on one GPU,
    and the tokens it says that holds."""

    memory_bytes: int
    tokens: int
    context_tokens: int | None


@dataclass(frozen=True)
class Fixture:
    name: str
    source_url: str
    engine: str
    engine_version: str | None
    config_path: Path
    gpu: str
    arguments: list[str]
    implied_arguments: list[str]
    predict_available_memory: bool
    logged: LoggedKvCache


def parse_log(engine: str, log: str) -> LoggedKvCache:
    if engine == "vllm":
        memory = next((float(m.group(1)) for p in _VLLM_MEMORY if (m := p.search(log))), None)
        tokens_match = _VLLM_TOKENS.search(log)
        blocks_match = _VLLM_BLOCKS.search(log)
        if tokens_match:
            tokens = int(tokens_match.group(1).replace(",", ""))
        elif blocks_match:
            tokens = int(blocks_match.group(1)) * VLLM_V0_BLOCK_TOKENS
        else:
            raise ValueError("no KV-cache token count in the vLLM log")
        context = _VLLM_CONTEXT.search(log)
        if memory is None:
            raise ValueError("no KV-cache memory in the vLLM log")
        return LoggedKvCache(
            memory_bytes=int(memory * GIB),
            tokens=tokens,
            context_tokens=int(context.group(1).replace(",", "")) if context else None,
        )
    kv = _SGLANG_KV.search(log)
    if kv is None:
        raise ValueError("no 'KV Cache is allocated' line in the SGLang log")
    # SGLang prints GiB (bytes / 2**30) and calls them GB.
    memory = float(kv.group(2)) + float(kv.group(3))
    state = _SGLANG_STATE.search(log)
    if state:
        memory += float(state.group(1)) + float(state.group(2))
    return LoggedKvCache(memory_bytes=int(memory * GIB), tokens=int(kv.group(1)), context_tokens=None)


def load_fixture(path: Path) -> Fixture:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return Fixture(
        name=data["name"],
        source_url=data["source_url"],
        engine=data["engine"],
        engine_version=data.get("engine_version"),
        config_path=path.parent / data["config"],
        gpu=data["gpu"],
        arguments=list(data.get("arguments") or []),
        implied_arguments=list(data.get("engine_implied_arguments") or []),
        predict_available_memory=bool(data.get("predict_available_memory")),
        logged=parse_log(data["engine"], data["log"]),
    )


def all_fixtures() -> list[Fixture]:
    return [load_fixture(path) for path in sorted(FIXTURES.glob("*.yaml"))]
