"""``python -m modelyard.bench.reference_server``: the reference server as a program.

Also the import path other packages use; everything lives in ``modelyard.bench.reference``.

    python -m modelyard.bench.reference_server --flavor vllm --model demo --ttft-ms 50 --itl-ms 5
    python -m modelyard.bench.reference_server vllm serve /models/qwen --port 8000 --served-model-name qwen
    python -m modelyard.bench.reference_server sglang --model-path /models/qwen --port 30000
"""

from __future__ import annotations

import sys

from modelyard.bench.reference import (
    FLAVORS,
    Flavor,
    ReferenceConfig,
    ReferenceEngine,
    ReferenceServer,
    ReferenceServerProcess,
    count_prompt_tokens,
    create_reference_app,
    main,
    parse_reference_argv,
)

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

if __name__ == "__main__":
    sys.exit(main())
