"""``python -m modelyard.bench.reference_server``: the reference server as a program.

Everything lives in ``modelyard.bench.reference``; import from there.

    python -m modelyard.bench.reference_server --flavor vllm --model demo --ttft-ms 50 --itl-ms 5
    python -m modelyard.bench.reference_server vllm serve /models/qwen --port 8000 --served-model-name qwen
    python -m modelyard.bench.reference_server sglang --model-path /models/qwen --port 30000
"""

from __future__ import annotations

import sys

from modelyard.bench.reference.server import main

if __name__ == "__main__":
    sys.exit(main())
