"""Real startup logs of vLLM and SGLang, and the estimator measured against them.

A case (YAML) is one engine start someone logged: its source URL, the engine and version, the
model's config.json, the GPUs and the flags, and the lines the engine printed while it sized its KV
cache. ``parse_log`` reads what the engine decided (the KV memory of one GPU and the tokens it
holds, plus vLLM's weights / activation / non-torch / CUDA-graph breakdown where it logged one).

Cases are split by source: the ``fitting`` directory holds the starts the estimator's constants
were derived from (``tests/estimate/fixtures``), the ``evaluation`` directory starts from other
sources, never used to set a constant (``tests/estimate/evaluation``). ``source_key`` names the
source (a GitHub repository, a web site, modelyard's own field runs), and no source may be in both.

Usage::

    cases = load_cases(Path("tests/estimate/evaluation"), split="evaluation")
    for result in evaluate(cases):
        print(result.case.name, f"{result.kv_error:+.1%}")
    print(error_table(evaluate(cases)))
"""

from __future__ import annotations

import re
import shlex
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

import yaml

from modelyard.estimate.estimate_result import MemoryEstimate
from modelyard.estimate.gpus import parse_gpu_specs
from modelyard.estimate.memory import estimate_memory, kv_tokens_from_bytes
from modelyard.modeldir import read_model_facts

GIB = 1 << 30
Split = Literal["fitting", "evaluation"]

_VLLM_MEMORY = (
    re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    re.compile(r"kv_cache_size=([\d.]+)GiB"),
    re.compile(r"the rest of the memory reserved for KV Cache is ([\d.]+)GiB"),
)
_VLLM_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_VLLM_BLOCKS = re.compile(r"GPU blocks: (\d+)")
_VLLM_CONTEXT = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request")
_VLLM_USAGE = re.compile(
    r"Actual usage is ([\d.]+) GiB for weight, ([\d.]+) GiB for peak activation, ([\d.]+) GiB for "
    r"non-torch memory, and ([\d.]+) GiB for CUDAGraph memory"
)
_SGLANG_KV = re.compile(
    r"KV Cache is allocated\.(?: dtype: \S+,)?(?: #tokens: (\d+),)? K size: ([\d.]+) GB, V size: ([\d.]+) GB"
)
# An MLA pool (DeepSeek) holds one latent vector a token and logs a single size.
_SGLANG_KV_SINGLE = re.compile(
    r"KV Cache is allocated\.(?: dtype: \S+,)? #tokens: (\d+), KV size: ([\d.]+) GB"
)
_SGLANG_TOTAL = re.compile(r"max_total_num_tokens=(\d+)")
# SGLang's scheduler logs the memory free on its GPU at each step of its start, in GiB ("GB").
_SGLANG_AVAILABLE = re.compile(r"avail mem=([\d.]+) ?GB")
_SGLANG_STATE = re.compile(r"conv_state size: ([\d.]+) ?GB, ssm_state size: ([\d.]+) ?GB")
# vLLM's V0 engine (before 0.7) paged the cache in 16-token blocks and logged the block count.
VLLM_V0_BLOCK_TOKENS = 16


@dataclass(frozen=True)
class LoggedKvCache:
    """What the engine logged: the memory it gave the KV cache (and recurrent state) on one GPU,
    the tokens that holds, and (vLLM from 0.18) what else it counted."""

    memory_bytes: int
    tokens: int
    context_tokens: int | None
    weights_bytes: int | None = None
    activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    # What the engine took on that GPU once started, as its log tells (its CUDA context not
    # included): vLLM's weights + activations + non-torch + CUDA graphs + KV cache ("Actual usage
    # is ..."), SGLang's first "avail mem" minus its last. None: the log does not say.
    used_bytes: int | None = None


@dataclass(frozen=True)
class StartupCase:
    name: str
    source_url: str
    engine: str
    engine_version: str | None
    config_path: Path
    gpu: str
    arguments: list[str]
    predict_available_memory: bool
    logged: LoggedKvCache
    split: Split
    env: dict[str, str] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return source_key(self.source_url)


def source_key(url: str) -> str:
    """The source a log came from: ``owner/repo`` for GitHub, the host for other pages, and
    ``modelyard field runs`` for ours."""
    if url.startswith("field run"):
        return "modelyard field runs"
    parsed = urlparse(url)
    if parsed.netloc == "github.com":
        return "/".join(parsed.path.strip("/").split("/")[:2])
    return parsed.netloc


def _gib(text: str) -> int:
    return int(float(text) * GIB)


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
        if memory is None:
            raise ValueError("no KV-cache memory in the vLLM log")
        context = _VLLM_CONTEXT.search(log)
        usage = _VLLM_USAGE.search(log)
        used = sum(_gib(usage.group(index)) for index in (1, 2, 3, 4)) + int(memory * GIB) if usage else None
        return LoggedKvCache(
            memory_bytes=int(memory * GIB),
            tokens=tokens,
            context_tokens=int(context.group(1).replace(",", "")) if context else None,
            weights_bytes=_gib(usage.group(1)) if usage else None,
            activation_bytes=_gib(usage.group(2)) if usage else None,
            non_torch_bytes=_gib(usage.group(3)) if usage else None,
            cuda_graph_bytes=_gib(usage.group(4)) if usage else None,
            used_bytes=used,
        )
    kv = _SGLANG_KV.search(log)
    single = _SGLANG_KV_SINGLE.search(log)
    # SGLang prints GiB (bytes / 2**30) and calls them GB.
    if kv is not None:
        memory, logged_count = float(kv.group(2)) + float(kv.group(3)), kv.group(1)
    elif single is not None:
        memory, logged_count = float(single.group(2)), single.group(1)
    else:
        raise ValueError("no 'KV Cache is allocated' line in the SGLang log")
    state = _SGLANG_STATE.search(log)
    if state:
        memory += float(state.group(1)) + float(state.group(2))
    total = _SGLANG_TOTAL.search(log)
    count = logged_count or (total.group(1) if total else None)
    if count is None:
        raise ValueError("no token count (#tokens or max_total_num_tokens) in the SGLang log")
    available = [float(found) for found in _SGLANG_AVAILABLE.findall(log)]
    used = int((available[0] - available[-1]) * GIB) if len(available) >= 2 else None
    return LoggedKvCache(
        memory_bytes=int(memory * GIB), tokens=int(count), context_tokens=None, used_bytes=used
    )


def load_case(path: Path, split: Split) -> StartupCase:
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    version = data.get("engine_version")
    return StartupCase(
        name=str(data["name"]),
        source_url=str(data["source_url"]),
        engine=str(data["engine"]),
        engine_version=str(version) if version is not None else None,
        config_path=(path.parent / data["config"]).resolve(),
        gpu=str(data["gpu"]),
        arguments=[str(argument) for argument in data.get("arguments") or []],
        predict_available_memory=bool(data.get("predict_available_memory")),
        logged=parse_log(str(data["engine"]), str(data["log"])),
        split=split,
        env={str(key): str(value) for key, value in (data.get("env") or {}).items()},
    )


def load_cases(directory: Path, split: Split) -> list[StartupCase]:
    return [load_case(path, split) for path in sorted(directory.glob("*.yaml"))]


@dataclass(frozen=True)
class CaseResult:
    case: StartupCase
    estimate: MemoryEstimate
    predicted_kv_bytes: int
    predicted_tokens: int

    @property
    def kv_error(self) -> float:
        """Predicted KV memory against the logged, relative (+ = we predict more)."""
        return self.predicted_kv_bytes / self.case.logged.memory_bytes - 1

    @property
    def kv_error_bytes(self) -> int:
        return self.predicted_kv_bytes - self.case.logged.memory_bytes

    @property
    def token_error(self) -> float:
        return self.predicted_tokens / self.case.logged.tokens - 1

    def component_errors(self) -> dict[str, float]:
        """Predicted minus logged GiB per component, where the engine logged them."""
        logged = self.case.logged
        pairs = {
            "weights": (self.estimate.weights_bytes, logged.weights_bytes),
            "activation": (self.estimate.activation_bytes, logged.activation_bytes),
            "non_torch": (self.estimate.non_torch_bytes, logged.non_torch_bytes),
        }
        return {name: (ours - theirs) / GIB for name, (ours, theirs) in pairs.items() if theirs is not None}


def estimate_case(case: StartupCase) -> MemoryEstimate:
    # A case's arguments are argv words; joined into one shell line so a JSON value keeps its quotes.
    return estimate_memory(
        read_model_facts(case.config_path),
        case.engine,
        parse_gpu_specs(case.gpu),
        [shlex.join(case.arguments)] if case.arguments else [],
        engine_version=case.engine_version,
        env=case.env,
    )


def evaluate(cases: list[StartupCase]) -> list[CaseResult]:
    """The estimator's predicted KV memory and tokens (on the GPUs' total memory) for each case
    that has everything the engine saw (``predict_available_memory``)."""
    results = []
    for case in cases:
        if not case.predict_available_memory:
            continue
        estimate = estimate_case(case)
        kv_bytes = estimate.plan_on_total.kv_cache_bytes
        context = case.logged.context_tokens or estimate.context_tokens
        tokens, _ = kv_tokens_from_bytes(
            estimate.cache,
            kv_bytes,
            context,
            case.engine,
            prefix_caching=estimate.prefix_caching,
        )
        results.append(CaseResult(case, estimate, kv_bytes, tokens))
    return results


@dataclass(frozen=True)
class ErrorSummary:
    engine: str
    count: int
    median_abs_kv_error: float
    worst_kv_error: float
    worst_case: str
    median_abs_token_error: float
    worst_token_error: float
    # The KV memory error in GiB: a 75 % error on a 3 GiB cache is 2.3 GiB.
    median_abs_kv_gib: float
    worst_abs_kv_gib: float


def summarize(results: list[CaseResult]) -> list[ErrorSummary]:
    summaries = []
    for engine in sorted({result.case.engine for result in results}):
        mine = [result for result in results if result.case.engine == engine]
        worst = max(mine, key=lambda result: abs(result.kv_error))
        worst_tokens = max(mine, key=lambda result: abs(result.token_error))
        summaries.append(
            ErrorSummary(
                engine=engine,
                count=len(mine),
                median_abs_kv_error=statistics.median(abs(result.kv_error) for result in mine),
                worst_kv_error=worst.kv_error,
                worst_case=worst.case.name,
                median_abs_token_error=statistics.median(abs(result.token_error) for result in mine),
                worst_token_error=worst_tokens.token_error,
                median_abs_kv_gib=statistics.median(abs(result.kv_error_bytes) / GIB for result in mine),
                worst_abs_kv_gib=max(abs(result.kv_error_bytes) / GIB for result in mine),
            )
        )
    return summaries


def error_table(results: list[CaseResult]) -> str:
    rows = [
        "engine  cases | KV memory: median |err|  worst    median GiB  worst GiB"
        " | tokens: median |err|  worst   | worst case"
    ]
    for summary in summarize(results):
        rows.append(
            f"{summary.engine:<7} {summary.count:>5} | {summary.median_abs_kv_error:>22.1%}  "
            f"{summary.worst_kv_error:>+7.1%}  {summary.median_abs_kv_gib:>10.2f}  "
            f"{summary.worst_abs_kv_gib:>9.2f} | {summary.median_abs_token_error:>19.1%}  "
            f"{summary.worst_token_error:>+7.1%}  | {summary.worst_case}"
        )
    return "\n".join(rows)
