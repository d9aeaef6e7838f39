"""The reference server's settings, and how its command line (its own, or a real engine's) maps onto them.

Two command-line forms are accepted:

    python -m modelyard.bench.reference_server --flavor vllm --model demo --ttft-ms 50 --itl-ms 5
    python -m modelyard.bench.reference_server vllm serve /models/qwen --port 8000 --served-model-name qwen
    python -m modelyard.bench.reference_server sglang --model-path /models/qwen --port 30000
    python -m modelyard.bench.reference_server transformers serve /models/qwen --port 8000

After an engine word the engine's own flags that matter here are read (host, port, served model name,
API key, maximum model length; playing vLLM, its key from ``VLLM_API_KEY`` when no ``--api-key``
is given, as vLLM does) and every other flag is ignored, with one log line naming them, so the
platform can launch this server wherever it would launch the real engine. The reference flags
(``--ttft-ms`` ...) are accepted in both forms.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from modelyard.errors import InvalidInput

GIB = 1 << 30
VLLM_BLOCK_TOKENS = 16

Flavor = Literal["vllm", "sglang", "transformers"]
FLAVORS: tuple[Flavor, ...] = ("vllm", "sglang", "transformers")


@dataclass(slots=True)
class ReferenceConfig:
    """How the reference server behaves. Every timing is exact up to the event loop's timer precision.

    Token ``j`` (0-based) of a response is produced at ``ttft_ms + j * itl_ms`` after the request is
    admitted. The first token is sent alone; later tokens go out ``tokens_per_chunk`` at a time, each
    chunk when its last token is produced, so a streamed chunk gap is ``tokens_per_chunk * itl_ms``.
    """

    flavor: Flavor = "vllm"
    served_model_names: list[str] = field(default_factory=lambda: ["reference-model"])
    model_path: str = "reference-model"
    host: str = "127.0.0.1"
    port: int = 0
    """0 picks a free port; ``ReferenceServer.base_url`` (or ``--port-file``) tells which."""
    ttft_ms: float = 20.0
    itl_ms: float = 5.0
    tokens_per_chunk: int = 1
    max_concurrency: int = 256
    """Requests beyond this wait in a queue (their wait adds to their TTFT)."""
    output_tokens: int = 16
    """Tokens generated when a request gives no ``max_tokens``."""
    reasoning_tokens: int = 0
    """The first N generated tokens are streamed as reasoning, in the flavor's reasoning field."""
    omit_usage: bool = False
    omit_done: bool = False
    cut_after_chunks: int | None = None
    """Close the connection after this many generated chunks, without ending the stream."""
    fail_start: str | None = None
    """Print an engine-style failure line with this message and exit with status 1."""
    startup_delay_s: float = 0.0
    """Simulated model loading time before the server is ready."""
    slow_requests: int = 0
    """The first N generation requests each wait ``slow_request_extra_ms`` more before their
    first token: an engine that is busy at first (a CPU shared with another start)."""
    slow_request_extra_ms: float = 0.0
    kv_cache_tokens: int = 262_144
    max_model_len: int = 32_768
    api_key: str | None = None
    embedding_dimensions: int = 16
    port_file: str | None = None
    workers: int = 1
    # Multi-node (a gang): this rank of ``nnodes``; vLLM's ``--headless`` and SGLang's ranks
    # above 0 serve no HTTP, they only hold their share of the model.
    nnodes: int = 1
    node_rank: int = 0
    headless: bool = False
    """Server processes sharing the port (the program only); limits and metrics are per process."""
    ignored_arguments: list[str] = field(default_factory=list)
    # The KV memory it logs ("Available KV cache memory", SGLang's K and V sizes), when its memory
    # model is on (``--double-gpu-memory-gib``): None logs tokens only.
    kv_cache_memory_gib: float | None = None
    double_spec_tokens: int = 0
    """Speculative decoding as the double plays it: tokens proposed per step (0: none). Its
    ``/metrics`` counts drafts, draft tokens and accepted tokens (vLLM's names) as it generates."""
    double_spec_acceptance_ratio: float = 0.0
    """The share of proposed tokens the double accepts (0 to 1)."""
    # The memory model's overhead, and the CUDA graphs its vLLM flavour logs ("Actual usage is
    # ..."; None: no such line).
    overhead_gib: float = 0.0
    cuda_graph_gib: float | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.flavor not in FLAVORS:
            problems.append(f"flavor {self.flavor!r} is not one of {', '.join(FLAVORS)}")
        if self.ttft_ms < 0 or self.itl_ms < 0:
            problems.append(f"ttft_ms={self.ttft_ms} and itl_ms={self.itl_ms} must be >= 0")
        if self.tokens_per_chunk < 1:
            problems.append(f"tokens_per_chunk={self.tokens_per_chunk} must be >= 1")
        if self.max_concurrency < 1:
            problems.append(f"max_concurrency={self.max_concurrency} must be >= 1")
        if self.workers < 1:
            problems.append(f"workers={self.workers} must be >= 1")
        if self.output_tokens < 1:
            problems.append(f"output_tokens={self.output_tokens} must be >= 1")
        if self.double_spec_tokens < 0 or not 0.0 <= self.double_spec_acceptance_ratio <= 1.0:
            problems.append(
                f"double_spec_tokens={self.double_spec_tokens} must be >= 0 and "
                f"double_spec_acceptance_ratio={self.double_spec_acceptance_ratio} in [0, 1]"
            )
        if not self.served_model_names:
            problems.append("at least one served model name is needed")
        if problems:
            raise InvalidInput("reference server settings are invalid: " + "; ".join(problems))

    @property
    def reasoning_field(self) -> str:
        """vLLM streams reasoning in ``reasoning``; SGLang and transformers in ``reasoning_content``."""
        return "reasoning" if self.flavor == "vllm" else "reasoning_content"

    def replace(self, **changes: object) -> ReferenceConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def to_argv(self) -> list[str]:
        """The command-line flags that rebuild this configuration (used to start it as a child process)."""
        argv = [
            "--flavor", self.flavor, "--model-path", self.model_path, "--host", self.host,
            "--port", str(self.port), "--ttft-ms", repr(self.ttft_ms), "--itl-ms", repr(self.itl_ms),
            "--tokens-per-chunk", str(self.tokens_per_chunk), "--max-concurrency", str(self.max_concurrency),
            "--output-tokens", str(self.output_tokens), "--reasoning-tokens", str(self.reasoning_tokens),
            "--startup-delay-s", repr(self.startup_delay_s), "--kv-cache-tokens", str(self.kv_cache_tokens),
            "--max-model-len", str(self.max_model_len),
            "--slow-requests", str(self.slow_requests),
            "--slow-request-extra-ms", repr(self.slow_request_extra_ms),
            "--double-spec-tokens", str(self.double_spec_tokens),
            "--double-spec-acceptance-ratio", repr(self.double_spec_acceptance_ratio),
            "--served-model-name", *self.served_model_names,
        ]  # fmt: skip
        if self.omit_usage:
            argv.append("--omit-usage")
        if self.omit_done:
            argv.append("--omit-done")
        if self.cut_after_chunks is not None:
            argv += ["--cut-after-chunks", str(self.cut_after_chunks)]
        if self.fail_start is not None:
            argv += ["--fail-start", self.fail_start]
        if self.api_key is not None:
            argv += ["--api-key", self.api_key]
        if self.port_file is not None:
            argv += ["--port-file", self.port_file]
        if self.workers != 1:
            argv += ["--workers", str(self.workers)]
        return argv


def _build_parser(engine: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m modelyard.bench.reference_server",
        description="OpenAI-compatible streaming server with exactly known timings (the engine double).",
        allow_abbrev=False,
    )
    if engine in ("vllm", "transformers"):
        parser.add_argument("model_positional", nargs="?", default=None, metavar="MODEL")
    parser.add_argument("--flavor", choices=FLAVORS, default=engine or "vllm")
    parser.add_argument("--model", "--model-path", dest="model_path", default=None)
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--port-file", default=None, help="Write the bound port here once listening.")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--max-model-len", "--context-length", dest="max_model_len", type=int, default=None)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--max-concurrency", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--reasoning-tokens", type=int, default=0)
    parser.add_argument("--omit-usage", action="store_true")
    parser.add_argument("--omit-done", action="store_true")
    parser.add_argument("--cut-after-chunks", type=int, default=None)
    parser.add_argument("--fail-start", default=None)
    parser.add_argument("--startup-delay-s", type=float, default=0.0)
    parser.add_argument("--slow-requests", type=int, default=0)
    parser.add_argument("--slow-request-extra-ms", type=float, default=0.0)
    parser.add_argument("--kv-cache-tokens", type=int, default=262_144)
    # The engines' memory knobs, and the double's memory model: with --double-gpu-memory-gib its KV
    # cache is GPU x knob - overhead, in tokens of --double-kv-bytes-per-position (16-token blocks),
    # as vLLM sizes it; a test sets the overhead to put the double's KV where it wants it.
    parser.add_argument(
        "--gpu-memory-utilization", "--mem-fraction-static", dest="memory_fraction", type=float
    )
    parser.add_argument("--double-gpu-memory-gib", type=float, default=None)
    parser.add_argument("--double-overhead-gib", type=float, default=0.0)
    # With it, vLLM's double logs its use as vLLM 0.18+ does ("Actual usage is ..."): the overhead
    # as weights, this much CUDA graph memory (outside the knob's budget, as in vLLM 0.25).
    parser.add_argument("--double-cuda-graph-gib", type=float, default=None)
    parser.add_argument("--double-kv-bytes-per-position", type=int, default=None)
    parser.add_argument("--double-spec-tokens", type=int, default=0)
    parser.add_argument("--double-spec-acceptance-ratio", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=1, help="Server processes sharing the port.")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--headless", action="store_true")
    return parser


_DEFAULT_PORTS: dict[str, int] = {"vllm": 8000, "sglang": 30000, "transformers": 8000}


# Where vLLM reads its API key when no --api-key is given (vllm/envs.py).
VLLM_API_KEY_VARIABLE = "VLLM_API_KEY"


def parse_reference_argv(argv: list[str], environment: Mapping[str, str] | None = None) -> ReferenceConfig:
    """Turn a command line (either form, see the module docstring) into a ``ReferenceConfig``;
    ``environment``: the process's (where vLLM's double finds ``VLLM_API_KEY``)."""
    rest = list(argv)
    engine: str | None = rest.pop(0) if rest and rest[0] in FLAVORS else None
    if engine in ("vllm", "transformers") and rest[:1] == ["serve"]:
        rest.pop(0)
    parser = _build_parser(engine)
    if engine is None:
        arguments = parser.parse_args(rest)
        ignored: list[str] = []
    else:
        arguments, ignored = parser.parse_known_args(rest)
    model_path = getattr(arguments, "model_positional", None) or arguments.model_path or "reference-model"
    api_key = arguments.api_key
    if api_key is None and arguments.flavor == "vllm" and environment is not None:
        api_key = environment.get(VLLM_API_KEY_VARIABLE) or None
    port = arguments.port
    if port is None:
        port = _DEFAULT_PORTS[arguments.flavor] if engine is not None else 0
    kv_tokens, kv_memory_gib = arguments.kv_cache_tokens, None
    gpu_gib, per_token = arguments.double_gpu_memory_gib, arguments.double_kv_bytes_per_position
    if gpu_gib and arguments.memory_fraction and per_token:
        kv_memory_gib = gpu_gib * arguments.memory_fraction - arguments.double_overhead_gib
        blocks = int(max(0.0, kv_memory_gib) * GIB) // (per_token * VLLM_BLOCK_TOKENS)
        kv_tokens = blocks * VLLM_BLOCK_TOKENS
    return ReferenceConfig(
        flavor=arguments.flavor,
        served_model_names=arguments.served_model_name or [model_path],
        model_path=model_path,
        host=arguments.host,
        port=port,
        ttft_ms=arguments.ttft_ms,
        itl_ms=arguments.itl_ms,
        tokens_per_chunk=arguments.tokens_per_chunk,
        max_concurrency=arguments.max_concurrency,
        output_tokens=arguments.output_tokens,
        reasoning_tokens=arguments.reasoning_tokens,
        omit_usage=arguments.omit_usage,
        omit_done=arguments.omit_done,
        cut_after_chunks=arguments.cut_after_chunks,
        fail_start=arguments.fail_start,
        startup_delay_s=arguments.startup_delay_s,
        slow_requests=arguments.slow_requests,
        slow_request_extra_ms=arguments.slow_request_extra_ms,
        kv_cache_tokens=kv_tokens,
        kv_cache_memory_gib=kv_memory_gib,
        overhead_gib=arguments.double_overhead_gib,
        cuda_graph_gib=arguments.double_cuda_graph_gib,
        max_model_len=arguments.max_model_len or 32_768,
        api_key=api_key,
        port_file=arguments.port_file,
        workers=arguments.workers,
        nnodes=arguments.nnodes,
        node_rank=arguments.node_rank,
        headless=arguments.headless,
        double_spec_tokens=arguments.double_spec_tokens,
        double_spec_acceptance_ratio=arguments.double_spec_acceptance_ratio,
        ignored_arguments=ignored,
    )
