"""The reference server: an OpenAI-compatible streaming server with exactly known timings.

It measures the benchmark client (``modelyard bench selftest``) and is the engine double of the
tests: ``--flavor vllm|sglang|transformers`` plays that engine's observable contract (health,
``/v1/models``, ``/metrics`` names, reasoning field, startup log lines, failure lines).

    from modelyard.bench.reference import ReferenceConfig, ReferenceServer

    with ReferenceServer(ReferenceConfig(flavor="sglang", ttft_ms=40, itl_ms=4)) as server:
        ...  # server.base_url is http://127.0.0.1:PORT
"""

from modelyard.bench.reference.app import ReferenceEngine, count_prompt_tokens, create_reference_app
from modelyard.bench.reference.config import FLAVORS, Flavor, ReferenceConfig, parse_reference_argv
from modelyard.bench.reference.server import ReferenceServer, ReferenceServerProcess, main

__all__ = [
    "FLAVORS",
    "Flavor",
    "ReferenceConfig",
    "ReferenceEngine",
    "ReferenceServer",
    "ReferenceServerProcess",
    "count_prompt_tokens",
    "create_reference_app",
    "main",
    "parse_reference_argv",
]
